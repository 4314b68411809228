//! The `bmc` section and each inventory node's `bmc`, and the directory that finds
//! a node's BMC: its inventory entry, else the orchestrator's word (the Kubernetes
//! annotation `hale.dev/bmc-address`), else `bmc.addressTemplate` over its id,
//! hostname and labels.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Address, BmcError, Credentials, Failure, Target, Timing, Tls};
use crate::core::settings::{de_duration, de_present};

/// `bmc:` — what every node's BMC shares.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct BmcConfig {
    /// `username:password`, or a mounted Secret's directory (`username`, `password`).
    #[serde(deserialize_with = "de_present")]
    pub credentials_file: Option<PathBuf>,
    /// IPMI cipher suite (`ipmitool -C`).
    pub cipher_suite: u8,
    /// One request.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// A graceful shutdown is forced after this; also how long any power change may
    /// take to show.
    #[serde(deserialize_with = "de_duration")]
    pub graceful_timeout: Duration,
    /// An address for nodes that name none, with `{id}`, `{hostname}` and
    /// `{labels.KEY}` filled in: `ipmi://{hostname}-bmc:623`.
    #[serde(deserialize_with = "de_present")]
    pub address_template: Option<String>,
    /// Trust only this CA for Redfish over https.
    #[serde(deserialize_with = "de_present")]
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (self-signed BMCs).
    pub insecure: bool,
}

impl Default for BmcConfig {
    fn default() -> Self {
        let t = Timing::default();
        BmcConfig {
            credentials_file: None,
            cipher_suite: t.cipher_suite,
            timeout: t.timeout,
            graceful_timeout: t.graceful,
            address_template: None,
            ca_file: None,
            insecure: false,
        }
    }
}

/// `inventory[].bmc`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeBmc {
    pub address: String,
    /// Else `bmc.credentialsFile`.
    #[serde(default, deserialize_with = "de_present")]
    pub credentials_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_present")]
    pub ca_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_present")]
    pub insecure: Option<bool>,
}

/// Every node's way to its BMC, resolved from the configuration: addresses parsed,
/// credentials read (a reload reads them again).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Directory {
    pub timing: Timing,
    default_credentials: Option<Credentials>,
    template: Option<String>,
    tls: Tls,
    nodes: BTreeMap<String, Target>,
}

/// A CA file must be readable PEM holding a certificate: found at load, not at
/// the first reboot.
fn read_ca(path: &std::path::Path) -> Result<(), String> {
    let pem = crate::read_small(path)?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(()),
        _ => Err(format!("{} holds no PEM certificate", path.display())),
    }
}

/// The placeholders a template may use.
fn fill(
    template: &str,
    id: &str,
    hostname: &str,
    labels: &BTreeMap<String, String>,
    named_by_alerts: bool,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("`{template}` has an unclosed {{"))?
            + open;
        let key = &rest[open + 1..close];
        let value = match key {
            "id" => id,
            "hostname" => hostname,
            _ => match key.strip_prefix("labels.") {
                Some(label) if label.is_empty() || label.trim() != label => {
                    return Err(format!(
                        "`{{{key}}}` is not a placeholder: the KEY of {{labels.KEY}} is a label's name, with no white space around it"
                    ));
                }
                Some(label) => labels
                    .get(label)
                    .map(String::as_str)
                    .ok_or_else(|| format!("the node has no label {label}"))?,
                None => {
                    return Err(format!(
                        "`{{{key}}}` is not a placeholder (use {{id}}, {{hostname}} or {{labels.KEY}})"
                    ));
                }
            },
        };
        // A node's name can come from any alert: only what a host name holds goes
        // into an address, so no value can move the address to another host or
        // path (`evil:8000/x#`), where the shared credentials would follow.
        let host_like = |v: &str| {
            !v.is_empty()
                && !v.starts_with(['-', '.'])
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        };
        if !host_like(value) {
            return Err(format!(
                "the node's {{{key}}} {value:?} cannot go into an address: only letters, digits, '.', '-' and '_' can, not starting with '-' or '.'"
            ));
        }
        // A name only alerts gave: with a '.', it could name a whole host of the
        // alert's choosing (`{id}` standing for the host), and the shared
        // credentials would go there.
        if named_by_alerts && value.contains('.') {
            return Err(format!(
                "the node is known from alerts alone, and its {{{key}}} {value:?} holds a '.': an alert would choose the host the shared credentials go to; list the node in `inventory` to give it a BMC"
            ));
        }
        out.push_str(value);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Directory {
    /// Resolve the section and the inventory's entries; the error is (key, message).
    pub fn resolve(
        section: &BmcConfig,
        inventory: &[(String, &NodeBmc)],
    ) -> Result<Directory, (String, String)> {
        if section.timeout.is_zero() {
            return Err(("bmc.timeout".into(), "must be positive".into()));
        }
        if section.graceful_timeout.is_zero() {
            return Err(("bmc.gracefulTimeout".into(), "must be positive".into()));
        }
        if section.cipher_suite > 17 {
            return Err((
                "bmc.cipherSuite".into(),
                "must be an IPMI cipher suite, 0..=17".into(),
            ));
        }
        let default_credentials = section
            .credentials_file
            .as_ref()
            .map(|p| Credentials::read(p))
            .transpose()
            .map_err(|e| ("bmc.credentialsFile".to_string(), e))?;
        if let Some(t) = &section.address_template {
            // One address for every node would send each node's power changes to
            // one machine's BMC.
            if !["{id}", "{hostname}", "{labels."]
                .iter()
                .any(|p| t.contains(p))
            {
                return Err((
                    "bmc.addressTemplate".into(),
                    format!(
                        "{t:?} names no node: every node's reboot and power-off would go to the same BMC; use {{id}}, {{hostname}} or {{labels.KEY}}"
                    ),
                ));
            }
            // Its BMCs have no credentials of their own to fall back on.
            if default_credentials.is_none() {
                return Err((
                    "bmc.credentialsFile".into(),
                    "no credentials for the BMCs bmc.addressTemplate names: set it".into(),
                ));
            }
            let sample = fill(t, "node-1", "node-1", &BTreeMap::new(), false)
                .or_else(|e| {
                    if e.contains("no label") {
                        Ok(String::new())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| ("bmc.addressTemplate".to_string(), e))?;
            if !sample.is_empty() {
                Address::parse(&sample).map_err(|e| ("bmc.addressTemplate".to_string(), e))?;
            }
        }
        if section.ca_file.is_some() && section.insecure {
            return Err((
                "bmc.insecure".into(),
                "with bmc.caFile: insecure checks no certificate (the CA would check nothing) and lets redfish+http annotation addresses have the credentials; keep one".into(),
            ));
        }
        let tls = Tls {
            ca_file: section.ca_file.clone(),
            insecure: section.insecure,
        };
        if let Some(ca) = &tls.ca_file {
            read_ca(ca).map_err(|e| ("bmc.caFile".to_string(), e))?;
        }
        let mut nodes = BTreeMap::new();
        for (i, (id, b)) in inventory.iter().enumerate() {
            let at = |key: &str| format!("inventory[{i}].bmc.{key}");
            let address = Address::parse(&b.address).map_err(|e| (at("address"), e))?;
            let https =
                matches!(&address, Address::Redfish { origin, .. } if origin.scheme() == "https");
            if b.ca_file.is_some() && b.insecure == Some(true) {
                return Err((
                    at("insecure"),
                    "with caFile: a certificate is either checked against the CA or not checked at all; keep one".into(),
                ));
            }
            if !https && (b.ca_file.is_some() || b.insecure == Some(true)) {
                let key = if b.ca_file.is_some() {
                    "caFile"
                } else {
                    "insecure"
                };
                return Err((
                    at(key),
                    format!(
                        "{} has no certificate to check: {key} is for redfish+https only",
                        b.address
                    ),
                ));
            }
            if let Some(ca) = &b.ca_file {
                read_ca(ca).map_err(|e| (at("caFile"), e))?;
            }
            let credentials = match &b.credentials_file {
                Some(p) => Credentials::read(p).map_err(|e| (at("credentialsFile"), e))?,
                None => default_credentials.clone().ok_or_else(|| {
                    (
                        at("credentialsFile"),
                        "no credentials: set it here or bmc.credentialsFile".to_string(),
                    )
                })?,
            };
            if matches!(address, Address::Ipmi { .. }) {
                let from = match &b.credentials_file {
                    Some(_) => at("credentialsFile"),
                    None => "bmc.credentialsFile".to_string(),
                };
                super::ipmi::takes(&credentials).map_err(|e| (from, e))?;
            }
            nodes.insert(
                id.clone(),
                Target {
                    address,
                    credentials,
                    tls: Tls {
                        ca_file: b.ca_file.clone().or_else(|| tls.ca_file.clone()),
                        insecure: b.insecure.unwrap_or(tls.insecure),
                    },
                },
            );
        }
        Ok(Directory {
            timing: Timing {
                timeout: section.timeout,
                graceful: section.graceful_timeout,
                cipher_suite: section.cipher_suite,
                ..Timing::default()
            },
            default_credentials,
            template: section.address_template.clone(),
            tls,
            nodes,
        })
    }

    /// Whether any node can have a BMC at all.
    pub fn configured(&self) -> bool {
        !self.nodes.is_empty() || self.template.is_some() || self.default_credentials.is_some()
    }

    /// Whether the node named in the inventory has a BMC there.
    pub fn listed(&self, id: &str) -> bool {
        self.nodes.contains_key(id)
    }

    /// The node's BMC: its inventory entry, else `annotation` (the orchestrator's
    /// word), else the template. The error says what is missing.
    /// `named_by_alerts`: the node is known from alerts alone, so its id and
    /// hostname are whatever an alert said.
    pub fn target(
        &self,
        id: &str,
        hostname: Option<&str>,
        labels: &BTreeMap<String, String>,
        annotation: Option<&str>,
        named_by_alerts: bool,
    ) -> Result<Target, BmcError> {
        if let Some(t) = self.nodes.get(id) {
            return Ok(t.clone());
        }
        let missing = |what: String| BmcError::new(Failure::Missing, what);
        let address = match (annotation, &self.template) {
            (Some(a), _) => {
                let address = Address::parse(a)
                    .map_err(|e| missing(format!("annotation hale.dev/bmc-address: {e}")))?;
                // Anyone who may annotate the Node chose this address: the shared
                // credentials go to it only encrypted, unless bmc.insecure says so.
                if let Address::Redfish { origin, .. } = &address
                    && origin.scheme() == "http"
                    && !self.tls.insecure
                {
                    return Err(missing(format!(
                        "annotation hale.dev/bmc-address: {address} would send the shared credentials in clear; use redfish+https, or set bmc.insecure"
                    )));
                }
                address
            }
            (None, Some(t)) => {
                let text = fill(t, id, hostname.unwrap_or(id), labels, named_by_alerts)
                    .map_err(|e| missing(format!("bmc.addressTemplate: {e}")))?;
                Address::parse(&text).map_err(|e| missing(format!("bmc.addressTemplate: {e}")))?
            }
            (None, None) => {
                return Err(missing(
                    "no BMC: give the node one in inventory[].bmc, with bmc.addressTemplate, or, on Kubernetes, with the hale.dev/bmc-address annotation".into(),
                ));
            }
        };
        let credentials = self.default_credentials.clone().ok_or_else(|| {
            missing(format!(
                "no credentials for {address}: set bmc.credentialsFile"
            ))
        })?;
        Ok(Target {
            address,
            credentials,
            tls: self.tls.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_take_no_value_that_could_move_the_address() {
        let labels: BTreeMap<String, String> = [("rack".to_string(), "r/1".to_string())].into();
        let template = "redfish+https://{hostname}-bmc.example/redfish/v1/Systems/1";
        for bad in [
            "127.0.0.1:41008/redfish/v1/Systems/1#",
            "evil@host",
            "a?b",
            "a b",
            "-oProxy",
            ".hidden",
            "",
            "nöde",
        ] {
            let e = fill(template, "n1", bad, &labels, false).unwrap_err();
            assert!(e.contains("cannot go into an address"), "{bad}: {e}");
        }
        let e = fill("ipmi://{labels.rack}-bmc", "n1", "n1", &labels, false).unwrap_err();
        assert!(e.contains("{labels.rack}"), "{e}");
        assert_eq!(
            fill(template, "n1", "gpu-14.dc1_a", &labels, false).unwrap(),
            "redfish+https://gpu-14.dc1_a-bmc.example/redfish/v1/Systems/1"
        );
        // Through the directory: the node has no BMC, and says why.
        let dir = Directory {
            template: Some(template.into()),
            default_credentials: Some(Credentials::new("admin", "pw")),
            ..Directory::default()
        };
        let e = dir
            .target(
                "x",
                Some("127.0.0.1:41008/x#"),
                &BTreeMap::new(),
                None,
                false,
            )
            .unwrap_err();
        assert!(e.to_string().contains("cannot go into an address"), "{e}");
        // Named by alerts alone, a name with a '.' could be a whole host.
        let whole = Directory {
            template: Some("redfish+https://{id}/redfish/v1/Systems/1".into()),
            default_credentials: Some(Credentials::new("admin", "pw")),
            ..Directory::default()
        };
        let e = whole
            .target("x.evil.example", None, &BTreeMap::new(), None, true)
            .unwrap_err();
        assert!(e.to_string().contains("known from alerts alone"), "{e}");
        whole
            .target("x.dc1.example", None, &BTreeMap::new(), None, false)
            .expect("listed by the operator: its name is theirs");
        whole
            .target("gpu-7", None, &BTreeMap::new(), None, true)
            .expect("no '.', no host of the alert's choosing");
    }

    #[test]
    fn templates_fill_id_hostname_and_labels() {
        let labels: BTreeMap<String, String> = [("rack".to_string(), "r12".to_string())].into();
        assert_eq!(
            fill(
                "ipmi://{hostname}-bmc.{labels.rack}:623",
                "n1",
                "gpu-14",
                &labels,
                false
            )
            .unwrap(),
            "ipmi://gpu-14-bmc.r12:623"
        );
        assert!(
            fill("ipmi://{host}", "n1", "h", &labels, false)
                .unwrap_err()
                .contains("not a placeholder")
        );
        assert!(
            fill("ipmi://{labels.row}", "n1", "h", &labels, false)
                .unwrap_err()
                .contains("no label row")
        );
        assert!(
            fill("ipmi://{id", "n1", "h", &labels, false)
                .unwrap_err()
                .contains("unclosed")
        );
    }

    #[test]
    fn a_node_finds_its_bmc_in_order_inventory_annotation_template() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("c");
        std::fs::write(&creds, "admin:pw-default\n").unwrap();
        let own = dir.path().join("own");
        std::fs::write(&own, "root:pw-own\n").unwrap();
        let section = BmcConfig {
            credentials_file: Some(creds.clone()),
            address_template: Some("ipmi://{id}-bmc".into()),
            ..BmcConfig::default()
        };
        let listed = NodeBmc {
            address: "redfish+https://10.0.0.1/redfish/v1/Systems/1".into(),
            credentials_file: Some(own),
            ca_file: None,
            insecure: Some(true),
        };
        let d = Directory::resolve(&section, &[("a".into(), &listed)]).unwrap();
        let none = BTreeMap::new();
        let a = d
            .target("a", None, &none, Some("ipmi://elsewhere"), false)
            .unwrap();
        assert_eq!(
            a.address.to_string(),
            "redfish+https://10.0.0.1/redfish/v1/Systems/1"
        );
        assert_eq!(a.credentials.username, "root");
        assert!(a.tls.insecure);
        let b = d
            .target("b", None, &none, Some("ipmi://10.0.0.2:6230"), false)
            .unwrap();
        assert_eq!(b.address.to_string(), "ipmi://10.0.0.2:6230");
        assert_eq!(b.credentials.username, "admin");
        let c = d.target("c", None, &none, None, false).unwrap();
        assert_eq!(c.address.to_string(), "ipmi://c-bmc:623");

        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "not a certificate").unwrap();
        let with_ca = |ca: PathBuf| BmcConfig {
            ca_file: Some(ca),
            ..BmcConfig::default()
        };
        let e = Directory::resolve(&with_ca(not_pem), &[]).unwrap_err();
        assert_eq!(e.0, "bmc.caFile");
        assert!(e.1.contains("no PEM certificate"), "{e:?}");
        let e = Directory::resolve(&with_ca(dir.path().join("nope.pem")), &[]).unwrap_err();
        assert!(e.1.contains("cannot read"), "{e:?}");

        // IPMI takes at most 20 bytes of password; Redfish, any.
        let long = dir.path().join("long");
        std::fs::write(&long, "admin:twenty-one-bytes-pw!!\n").unwrap();
        let on = |address: &str| NodeBmc {
            address: address.into(),
            credentials_file: Some(long.clone()),
            ca_file: None,
            insecure: None,
        };
        let e = Directory::resolve(
            &BmcConfig::default(),
            &[("a".into(), &on("ipmi://10.0.0.1"))],
        )
        .unwrap_err();
        assert_eq!(e.0, "inventory[0].bmc.credentialsFile");
        assert!(e.1.contains("21 bytes, and IPMI takes at most 20"), "{e:?}");
        assert!(!e.1.contains("twenty-one"), "{e:?}");
        let redfish = on("redfish+https://10.0.0.1/redfish/v1/Systems/1");
        Directory::resolve(&BmcConfig::default(), &[("a".into(), &redfish)]).unwrap();

        let bare = Directory::resolve(&BmcConfig::default(), &[]).unwrap();
        let e = bare.target("c", None, &none, None, false).unwrap_err();
        assert_eq!(e.class, Failure::Missing);
        assert!(e.to_string().contains("hale.dev/bmc-address"), "{e}");
        let e = bare
            .target("c", None, &none, Some("ipmi://x"), false)
            .unwrap_err();
        assert!(e.to_string().contains("bmc.credentialsFile"), "{e}");
        // A template with no credentials to go with it is refused at load.
        let e = Directory::resolve(
            &BmcConfig {
                address_template: Some("ipmi://{id}-bmc".into()),
                ..BmcConfig::default()
            },
            &[],
        )
        .unwrap_err();
        assert_eq!(e.0, "bmc.credentialsFile", "{e:?}");
        // A template that names no node would send every node's power to one BMC;
        // a label placeholder that names no label is none.
        for (template, says) in [
            ("", "names no node"),
            (
                "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1",
                "names no node",
            ),
            ("ipmi://{labels.}-bmc", "is not a placeholder"),
            ("ipmi://{labels. rack}-bmc", "is not a placeholder"),
        ] {
            let e = Directory::resolve(
                &BmcConfig {
                    credentials_file: Some(creds.clone()),
                    address_template: Some(template.into()),
                    ..BmcConfig::default()
                },
                &[],
            )
            .unwrap_err();
            assert_eq!(e.0, "bmc.addressTemplate", "{e:?}");
            assert!(e.1.contains(says), "{e:?}");
        }
        // TLS settings that contradict each other, or have no TLS to apply to.
        let e = Directory::resolve(
            &BmcConfig {
                ca_file: Some(dir.path().join("nope.pem")),
                insecure: true,
                ..BmcConfig::default()
            },
            &[],
        )
        .unwrap_err();
        assert_eq!(e.0, "bmc.insecure", "{e:?}");
        for (address, ca, insecure, key) in [
            ("ipmi://10.0.0.1", true, None, "caFile"),
            (
                "redfish+http://10.0.0.1/redfish/v1/Systems/1",
                false,
                Some(true),
                "insecure",
            ),
            (
                "redfish+https://10.0.0.1/redfish/v1/Systems/1",
                true,
                Some(true),
                "insecure",
            ),
        ] {
            let b = NodeBmc {
                address: address.into(),
                credentials_file: Some(creds.clone()),
                ca_file: ca.then(|| dir.path().join("nope.pem")),
                insecure,
            };
            let e = Directory::resolve(&BmcConfig::default(), &[("a".into(), &b)]).unwrap_err();
            assert_eq!(e.0, format!("inventory[0].bmc.{key}"), "{address}: {e:?}");
        }
    }
}
