//! GPU health from `nvidia-smi -q -x`, for sites without DCGM: per GPU its ECC
//! counts, remapped rows, retired pages, clock event reasons and PCIe replays,
//! labelled as dcgm-exporter labels its series (gpu, UUID, pci_bus_id, device,
//! modelName) so `rules/gpu.yml` reads either source. A fact the GPU does not
//! report ("N/A": retired pages on Hopper, ECC where it is disabled) gets no
//! series — the rules call it unavailable, never zero. Xids are not here: the
//! driver writes them only to the kernel log (`rules/mtail`).
//!
//! `hale_gpu_collector_success` says whether nvidia-smi answered with a report
//! for every GPU; 0 carries an `error` label: `timeout`, `failed` (it could not
//! run or exited with an error), `no_devices` (the driver sees no GPU),
//! `unreadable` (its output is not the report) or `gpu_error` (it answered, but
//! could not read a GPU: one that fell off the bus turns its fields into
//! "Unknown Error"; a field it lacks the permission for, "Insufficient
//! Permissions"). Without nvidia-smi (no driver, so no
//! NVIDIA GPU to read) the file holds no success series: GPU health is then
//! unavailable, not failed.

use std::fmt::Write as _;

use super::ToolFailure;
use crate::label_value;

/// The arguments: the full report, as XML.
pub const NVIDIA_SMI_ARGS: &[&str] = &["-q", "-x"];

/// NVML's clock event reasons, by the name nvidia-smi gives each in its report
/// (after `clocks_event_reason_` or, before driver 535, `clocks_throttle_reason_`),
/// and their bit in the mask DCGM exports.
const CLOCK_EVENT_REASONS: &[(&str, u32)] = &[
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clocks_setting", 0x100),
];

/// How old a textfile the rules take for a collector that stopped
/// (`alerts/collectors.yml`).
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// What nvidia-smi prints in place of a value it may not or could not read, where
/// a text would do (the driver's recovery action): no reading.
const NOT_READ: &[&str] = &["ERR!", "Insufficient Permissions"];

/// What nvidia-smi prints in place of a value it could not read from a GPU.
const UNREADABLE: &[&str] = &["Unknown Error", "GPU is lost", "GPU requires reset"];

/// One run's report: the driver and what each GPU said.
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    pub driver_version: String,
    pub gpus: Vec<Gpu>,
    /// GPUs the driver counts that the report has no readable entry for, and
    /// the entries nvidia-smi could not read, said for the log.
    pub unreadable: Vec<String>,
}

/// One GPU's facts; `None` where the GPU reports none.
#[derive(Debug, Default, PartialEq)]
pub struct Gpu {
    /// Its position in the report, which is NVML's index (dcgm-exporter's `gpu`).
    pub index: usize,
    pub uuid: String,
    pub pci_bus_id: String,
    /// The /dev/nvidiaN number (dcgm-exporter's `device` is `nvidiaN`).
    pub minor: Option<u64>,
    pub model: String,
    pub ecc_volatile: Ecc,
    pub ecc_aggregate: Ecc,
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages: Option<RetiredPages>,
    /// NVML's clock event reasons mask.
    pub clock_event_reasons: Option<u32>,
    pub pcie_replays: Option<u64>,
    /// What the driver says the GPU needs to recover ("None" when nothing),
    /// drivers 550 and later.
    pub recovery_action: Option<String>,
    /// Fields this reads that held neither a reading nor "N/A" (`ERR!`,
    /// "Insufficient Permissions"): the GPU's health is not read whole.
    pub odd: Vec<String>,
}

#[derive(Debug, Default, PartialEq)]
pub struct Ecc {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
}

/// Each field on its own: one nvidia-smi could not read takes no other with it.
#[derive(Debug, Default, PartialEq)]
pub struct RemappedRows {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
    pub pending: Option<bool>,
    pub failure: Option<bool>,
}

#[derive(Debug, Default, PartialEq)]
pub struct RetiredPages {
    pub single_bit: Option<u64>,
    pub double_bit: Option<u64>,
    /// `None`: nvidia-smi printed something it could not read.
    pub pending: Option<bool>,
}

/// Read `nvidia-smi -q -x`'s report.
pub fn parse(xml: &str) -> Result<Report, String> {
    // A warning nvidia-smi prints before the document ("WARNING: infoROM is
    // corrupted at gpu …") is not the report.
    let xml = ["<?xml", "<nvidia_smi_log"]
        .iter()
        .filter_map(|start| xml.find(start))
        .min()
        .map_or(xml, |at| &xml[at..]);
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, options)
        .map_err(|e| format!("not XML: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "nvidia_smi_log" {
        return Err(format!(
            "not nvidia-smi's report: the document is <{}>",
            root.tag_name().name()
        ));
    }
    let mut report = Report {
        driver_version: text(root, &["driver_version"]).unwrap_or_default(),
        ..Default::default()
    };
    for (index, node) in children(root, "gpu").enumerate() {
        let gpu = read_gpu(index, node);
        let id = node.attribute("id").unwrap_or("?");
        match unreadable_field(node) {
            Some(field) => report
                .unreadable
                .push(format!("GPU {index} ({id}): {field}")),
            None if gpu.uuid.is_empty() => report
                .unreadable
                .push(format!("GPU {index} ({id}): no UUID")),
            None if !gpu.odd.is_empty() => report
                .unreadable
                .push(format!("GPU {index} ({id}): {}", gpu.odd.join(", "))),
            None => {}
        }
        report.gpus.push(gpu);
    }
    let attached = text(root, &["attached_gpus"]).and_then(|n| n.parse::<usize>().ok());
    if let Some(attached) = attached.filter(|&n| n > report.gpus.len()) {
        report.unreadable.push(format!(
            "the driver has {attached} GPU(s), the report lists {}",
            report.gpus.len()
        ));
    }
    Ok(report)
}

fn read_gpu(index: usize, node: roxmltree::Node) -> Gpu {
    let pci_bus_id = text(node, &["pci", "pci_bus_id"])
        .or_else(|| node.attribute("id").map(str::to_string))
        .unwrap_or_default();
    let mut odd = Vec::new();
    let ecc_errors = child(node, "ecc_errors");
    Gpu {
        index,
        uuid: text(node, &["uuid"]).unwrap_or_default(),
        pci_bus_id,
        minor: number(node, &["minor_number"]),
        model: text(node, &["product_name"]).unwrap_or_default(),
        ecc_volatile: ecc(ecc_errors.and_then(|e| child(e, "volatile")), &mut odd),
        ecc_aggregate: ecc(ecc_errors.and_then(|e| child(e, "aggregate")), &mut odd),
        remapped_rows: remapped_rows(node, &mut odd),
        retired_pages: retired_pages(node, &mut odd),
        clock_event_reasons: clock_event_reasons(node, &mut odd),
        pcie_replays: count_field(
            named(node, "pci").and_then(|p| named(p, "replay_counter")),
            &mut odd,
        )
        .read(),
        recovery_action: field(named(node, "gpu_recovery_action"), &mut odd, |t| {
            (!NOT_READ.contains(&t)).then(|| t.to_string())
        })
        .read(),
        odd,
    }
}

/// What a field this reads holds.
enum Field<T> {
    /// A reading.
    Read(T),
    /// None: absent, empty or "N/A" (the GPU does not report it).
    NotReported,
    /// Neither: what nvidia-smi prints where it could not read the field
    /// ("Unknown Error", said by `unreadable_field`) or any other text (`ERR!`,
    /// "Insufficient Permissions", a count past 64 bits), noted in `odd`.
    Odd,
}

impl<T> Field<T> {
    fn read(self) -> Option<T> {
        match self {
            Field::Read(v) => Some(v),
            Field::NotReported | Field::Odd => None,
        }
    }
}

/// The field `node` read with `parse`, any odd text noted in `odd`.
fn field<T>(
    node: Option<roxmltree::Node>,
    odd: &mut Vec<String>,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Field<T> {
    let Some(node) = node else {
        return Field::NotReported;
    };
    let text = node.text().unwrap_or_default().trim();
    if text.is_empty() || matches!(text.trim_matches(['[', ']']), "N/A" | "Not Supported") {
        return Field::NotReported;
    }
    if let Some(v) = parse(text) {
        return Field::Read(v);
    }
    if !unreadable(text) {
        odd.push(format!("{} is \"{text}\"", node.tag_name().name()));
    }
    Field::Odd
}

fn count_field(node: Option<roxmltree::Node>, odd: &mut Vec<String>) -> Field<u64> {
    field(node, odd, |t| t.parse().ok())
}

fn flag_field(node: Option<roxmltree::Node>, odd: &mut Vec<String>) -> Field<bool> {
    field(node, odd, |t| match t {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    })
}

/// ECC counts in either layout: `sram_correctable`, `dram_uncorrectable`, … (the
/// counts by memory, current drivers) or `single_bit`/`double_bit` with a
/// `total` (older drivers). A sum of the parts that report a number; `None`
/// when none does (ECC disabled, or no ECC) — or when a part holds something
/// else: a total short of one part falls, which the rules read as a counter
/// reset, and the next whole one then as new errors.
fn ecc(counts: Option<roxmltree::Node>, odd: &mut Vec<String>) -> Ecc {
    let Some(counts) = counts else {
        return Ecc::default();
    };
    // The sum so far, and whether a part spoiled it.
    let (mut correctable, mut uncorrectable) = ((None, false), (None, false));
    for part in counts.children().filter(|c| c.is_element()) {
        let name = part.tag_name().name();
        let (sum, value) = if name == "single_bit" {
            (&mut correctable, named(part, "total"))
        } else if name == "double_bit" {
            (&mut uncorrectable, named(part, "total"))
        } else if name.contains("_uncorrectable") {
            (&mut uncorrectable, Some(part))
        } else if name.ends_with("_correctable") {
            (&mut correctable, Some(part))
        } else {
            continue;
        };
        match count_field(value, odd) {
            Field::Read(v) => match sum.0.unwrap_or(0u64).checked_add(v) {
                Some(total) => sum.0 = Some(total),
                None => sum.1 = true,
            },
            Field::NotReported => {}
            Field::Odd => sum.1 = true,
        }
    }
    let whole = |(total, spoiled): (Option<u64>, bool)| total.filter(|_| !spoiled);
    Ecc {
        correctable: whole(correctable),
        uncorrectable: whole(uncorrectable),
    }
}

/// Ampere and later; "N/A" (no element children) before.
fn remapped_rows(gpu: roxmltree::Node, odd: &mut Vec<String>) -> Option<RemappedRows> {
    let rows = child(gpu, "remapped_rows")?;
    Some(RemappedRows {
        correctable: count_field(named(rows, "remapped_row_corr"), odd).read(),
        uncorrectable: count_field(named(rows, "remapped_row_unc"), odd).read(),
        pending: flag_field(named(rows, "remapped_row_pending"), odd).read(),
        failure: flag_field(named(rows, "remapped_row_failure"), odd).read(),
    })
}

/// Before Ampere; "N/A" on later GPUs.
fn retired_pages(gpu: roxmltree::Node, odd: &mut Vec<String>) -> Option<RetiredPages> {
    let pages = child(gpu, "retired_pages")?;
    let mut retired = |section: &str| {
        count_field(
            named(pages, section).and_then(|s| named(s, "retired_count")),
            odd,
        )
        .read()
    };
    let single_bit = retired("multiple_single_bit_retirement");
    let double_bit = retired("double_bit_retirement");
    // `pending_retirement` on current drivers, `pending_blacklist` on older ones;
    // neither read: none pending, as these GPUs always said.
    let (mut pending, mut spoiled) = (None, false);
    for name in ["pending_retirement", "pending_blacklist"] {
        match flag_field(named(pages, name), odd) {
            Field::Read(v) => pending = Some(pending.unwrap_or(false) || v),
            Field::NotReported => {}
            Field::Odd => spoiled = true,
        }
    }
    if single_bit.is_none() && double_bit.is_none() && pending.is_none() && !spoiled {
        return None;
    }
    // A field that says pages are pending stands, whatever the other holds.
    let pending = match pending {
        Some(true) => Some(true),
        _ if spoiled => None,
        known => Some(known.unwrap_or(false)),
    };
    Some(RetiredPages {
        single_bit,
        double_bit,
        pending,
    })
}

/// The mask of active reasons, from `<clocks_event_reasons>` (driver 535 and
/// later) or `<clocks_throttle_reasons>` (before); `None` if neither has a
/// reason with a reading — or one holds something else: a mask short of a
/// reason would say a HW slowdown is not there.
fn clock_event_reasons(gpu: roxmltree::Node, odd: &mut Vec<String>) -> Option<u32> {
    let (mut mask, mut spoiled) = (None, false);
    for (group, prefix) in [
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ] {
        let Some(reasons) = child(gpu, group) else {
            continue;
        };
        for reason in reasons.children().filter(|c| c.is_element()) {
            let name = reason.tag_name().name();
            let Some(bit) = name.strip_prefix(prefix).and_then(|r| {
                CLOCK_EVENT_REASONS
                    .iter()
                    .find(|(known, _)| *known == r)
                    .map(|(_, bit)| *bit)
            }) else {
                continue;
            };
            let active = field(Some(reason), odd, |t| match t {
                "Active" => Some(true),
                "Not Active" => Some(false),
                _ => None,
            });
            match active {
                Field::Read(true) => *mask.get_or_insert(0) |= bit,
                Field::Read(false) => {
                    mask.get_or_insert(0);
                }
                Field::NotReported => {}
                Field::Odd => spoiled = true,
            }
        }
    }
    mask.filter(|_| !spoiled)
}

/// The sections of a GPU's entry this reads; a field elsewhere nvidia-smi could
/// not read (a fan, a power reading) does not make the GPU's health unreadable.
const READ: &[&str] = &[
    "uuid",
    "pci",
    "ecc_errors",
    "remapped_rows",
    "retired_pages",
    "clocks_event_reasons",
    "clocks_throttle_reasons",
    "gpu_recovery_action",
];

/// The first field this reads that says nvidia-smi could not read it.
fn unreadable_field(gpu: roxmltree::Node) -> Option<String> {
    gpu.children()
        .filter(|c| c.is_element() && READ.contains(&c.tag_name().name()))
        .flat_map(|section| section.descendants())
        .filter(|n| n.is_element())
        .find(|n| n.text().is_some_and(unreadable))
        .map(|n| {
            format!(
                "{} is \"{}\"",
                n.tag_name().name(),
                n.text().unwrap_or_default().trim()
            )
        })
}

/// The element child `name` of `node`, if it has elements of its own (not "N/A").
fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    named(node, name).filter(|c| c.children().any(|g| g.is_element()))
}

fn children<'a, 'i: 'a>(
    node: roxmltree::Node<'a, 'i>,
    name: &'a str,
) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> + 'a {
    node.children()
        .filter(move |c| c.is_element() && c.tag_name().name() == name)
}

/// The first element child of `node` called `name`.
fn named<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

/// The text at `path` below `node`, trimmed; `None` if absent or empty.
fn text(node: roxmltree::Node, path: &[&str]) -> Option<String> {
    let mut at = node;
    for name in path {
        at = named(at, name)?;
    }
    let text = at.text()?.trim();
    (!text.is_empty() && !unreadable(text)).then(|| text.to_string())
}

/// Whether nvidia-smi printed `text` in place of a value it could not read.
fn unreadable(text: &str) -> bool {
    let text = text.trim().trim_matches(['[', ']']);
    UNREADABLE.contains(&text)
}

fn number(node: roxmltree::Node, path: &[&str]) -> Option<u64> {
    text(node, path)?.parse().ok()
}

/// What one run found, ready to be written.
#[derive(Debug)]
pub enum Collected {
    /// nvidia-smi answered (`unreadable` may still list GPUs it could not read).
    Report(Report),
    /// nvidia-smi is not installed: no driver here, nothing to check.
    NoDriver,
    /// No report: why, as the `error` label says it, and what happened.
    Failed {
        error: &'static str,
        message: String,
    },
}

impl Collected {
    /// From what running nvidia-smi gave.
    pub fn from_run(run: Result<String, ToolFailure>) -> Collected {
        match run {
            Ok(xml) => match parse(&xml) {
                // An answer that lists no GPU, and counts none it could not list.
                Ok(report) if report.gpus.is_empty() && report.unreadable.is_empty() => {
                    Collected::Failed {
                        error: "no_devices",
                        message: "nvidia-smi's report lists no GPU".into(),
                    }
                }
                Ok(report) => Collected::Report(report),
                Err(e) => Collected::Failed {
                    error: "unreadable",
                    message: format!("nvidia-smi's output: {e}"),
                },
            },
            Err(ToolFailure::Missing) => Collected::NoDriver,
            Err(ToolFailure::Timeout(message)) => Collected::Failed {
                error: "timeout",
                message,
            },
            Err(ToolFailure::Failed(message)) => Collected::Failed {
                error: "failed",
                message,
            },
            Err(ToolFailure::TooLarge(message)) => Collected::Failed {
                error: "unreadable",
                message,
            },
            // nvidia-smi fails as a whole when one GPU is lost, yet may still
            // print the report of the others: kept, with the failure said.
            Err(ToolFailure::Exited { message, stdout }) => match parse(&stdout) {
                Ok(mut report) => {
                    report.unreadable.push(message);
                    Collected::Report(report)
                }
                // The driver is loaded and sees no GPU: on a GPU node, GPUs that
                // failed to come up; not a host to run this on otherwise.
                Err(_) if message.contains("No devices were found") => Collected::Failed {
                    error: "no_devices",
                    message,
                },
                Err(_) => Collected::Failed {
                    error: "failed",
                    message,
                },
            },
        }
    }

    /// What went wrong, for the log; `None` when every GPU was read.
    pub fn problem(&self) -> Option<String> {
        match self {
            Collected::Report(report) if !report.unreadable.is_empty() => Some(format!(
                "nvidia-smi could not read every GPU: {}",
                report.unreadable.join("; ")
            )),
            Collected::Failed { message, .. } => Some(message.clone()),
            _ => None,
        }
    }

    /// The textfile: the collector's own series, then one family per fact.
    pub fn render(&self, now_seconds: f64) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "hale_gpu_collector_timestamp_seconds",
            "gauge",
            "When hale collect gpu last ran (Unix time).",
            &[(String::new(), format!("{now_seconds:.3}"))],
        );
        let success = match self {
            Collected::NoDriver => {
                out.push_str(
                    "# nvidia-smi is not installed: no NVIDIA driver, no GPU health to read.\n",
                );
                return out;
            }
            Collected::Failed { error, .. } => (format!("error=\"{error}\""), "0"),
            Collected::Report(r) if !r.unreadable.is_empty() => {
                ("error=\"gpu_error\"".to_string(), "0")
            }
            Collected::Report(_) => (String::new(), "1"),
        };
        family(
            &mut out,
            "hale_gpu_collector_success",
            "gauge",
            "1 when nvidia-smi answered in time with a report of every GPU; 0 with `error` saying why not.",
            &[(success.0, success.1.to_string())],
        );
        if let Collected::Report(report) = self {
            render_gpus(&mut out, report);
        }
        out
    }
}

fn render_gpus(out: &mut String, report: &Report) {
    let gpus: Vec<(String, &Gpu)> = report
        .gpus
        .iter()
        .filter(|g| !g.uuid.is_empty())
        .map(|g| (gpu_labels(g), g))
        .collect();
    let each = |fact: &dyn Fn(&Gpu) -> Option<String>| -> Vec<(String, String)> {
        gpus.iter()
            .filter_map(|(labels, g)| fact(g).map(|v| (labels.clone(), v)))
            .collect()
    };
    let count = |v: Option<u64>| v.map(|v| v.to_string());
    let flag = |v: bool| Some(u8::from(v).to_string());
    let driver = label_value(&report.driver_version);
    family(
        out,
        "hale_gpu_info",
        "gauge",
        "One series per GPU nvidia-smi reports, labelled as dcgm-exporter labels its series.",
        &gpus
            .iter()
            .map(|(labels, _)| (format!("{labels},driver_version=\"{driver}\""), "1".into()))
            .collect::<Vec<_>>(),
    );
    family(
        out,
        "hale_gpu_ecc_volatile_correctable_total",
        "counter",
        "Corrected (single-bit) ECC errors since the driver loaded.",
        &each(&|g| count(g.ecc_volatile.correctable)),
    );
    family(
        out,
        "hale_gpu_ecc_volatile_uncorrectable_total",
        "counter",
        "Uncorrectable (double-bit) ECC errors since the driver loaded.",
        &each(&|g| count(g.ecc_volatile.uncorrectable)),
    );
    family(
        out,
        "hale_gpu_ecc_aggregate_correctable_total",
        "counter",
        "Corrected ECC errors over the GPU's life.",
        &each(&|g| count(g.ecc_aggregate.correctable)),
    );
    family(
        out,
        "hale_gpu_ecc_aggregate_uncorrectable_total",
        "counter",
        "Uncorrectable ECC errors over the GPU's life.",
        &each(&|g| count(g.ecc_aggregate.uncorrectable)),
    );
    family(
        out,
        "hale_gpu_remapped_rows_correctable_total",
        "counter",
        "Memory rows remapped to spares after correctable errors, over the GPU's life.",
        &each(&|g| g.remapped_rows.as_ref().and_then(|r| count(r.correctable))),
    );
    family(
        out,
        "hale_gpu_remapped_rows_uncorrectable_total",
        "counter",
        "Memory rows remapped to spares after uncorrectable errors, over the GPU's life.",
        &each(&|g| {
            g.remapped_rows
                .as_ref()
                .and_then(|r| count(r.uncorrectable))
        }),
    );
    family(
        out,
        "hale_gpu_row_remap_pending",
        "gauge",
        "1 while a row remap waits for a GPU reset to take effect.",
        &each(&|g| {
            g.remapped_rows
                .as_ref()
                .and_then(|r| r.pending.and_then(flag))
        }),
    );
    family(
        out,
        "hale_gpu_row_remap_failure",
        "gauge",
        "1 once a row remap has failed (no spare row left).",
        &each(&|g| {
            g.remapped_rows
                .as_ref()
                .and_then(|r| r.failure.and_then(flag))
        }),
    );
    family(
        out,
        "hale_gpu_retired_pages_sbe_total",
        "counter",
        "Memory pages retired after multiple single-bit errors.",
        &each(&|g| g.retired_pages.as_ref().and_then(|p| count(p.single_bit))),
    );
    family(
        out,
        "hale_gpu_retired_pages_dbe_total",
        "counter",
        "Memory pages retired after a double-bit error.",
        &each(&|g| g.retired_pages.as_ref().and_then(|p| count(p.double_bit))),
    );
    family(
        out,
        "hale_gpu_retired_pages_pending",
        "gauge",
        "1 while pages wait to be retired at the next driver load.",
        &each(&|g| {
            g.retired_pages
                .as_ref()
                .and_then(|p| p.pending.and_then(flag))
        }),
    );
    family(
        out,
        "hale_gpu_clocks_event_reasons",
        "gauge",
        "NVML's mask of active clock event reasons (0x8 HW slowdown, 0x40 HW thermal slowdown, 0x80 HW power brake; see rules/gpu.yml).",
        &each(&|g| g.clock_event_reasons.map(|m| m.to_string())),
    );
    let recovery: Vec<(String, String)> = gpus
        .iter()
        .filter_map(|(labels, g)| {
            let action = g.recovery_action.as_ref()?;
            let asks = u8::from(action != "None");
            Some((
                format!("{labels},action=\"{}\"", label_value(action)),
                asks.to_string(),
            ))
        })
        .collect();
    family(
        out,
        "hale_gpu_recovery_action",
        "gauge",
        "1 while the driver says the GPU needs `action` to recover (NVML's GPU recovery action); 0 with action=\"None\".",
        &recovery,
    );
    family(
        out,
        "hale_gpu_pcie_replay_total",
        "counter",
        "PCIe packets the GPU's link replayed.",
        &each(&|g| count(g.pcie_replays)),
    );
}

fn gpu_labels(g: &Gpu) -> String {
    format!(
        "gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"{}\",modelName=\"{}\"",
        g.index,
        label_value(&g.uuid),
        label_value(&g.pci_bus_id),
        g.minor.map(|m| format!("nvidia{m}")).unwrap_or_default(),
        label_value(&g.model)
    )
}

/// One metric family; nothing when it has no sample.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, String)]) {
    if samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/gpu/h200-nvidia-smi-q.xml");
        std::fs::read_to_string(path).unwrap()
    }

    /// The H200 sample with `from` replaced by `to`, which must be in it.
    fn faulted(from: &str, to: &str) -> String {
        let xml = h200();
        assert!(xml.contains(from), "the sample has no {from}");
        xml.replacen(from, to, 1)
    }

    fn gpu(xml: &str) -> Gpu {
        let mut report = parse(xml).unwrap();
        assert_eq!(report.gpus.len(), 1);
        report.gpus.remove(0)
    }

    #[test]
    fn the_healthy_h200_reads_as_the_sample_shows() {
        let report = parse(&h200()).unwrap();
        assert_eq!(report.driver_version, "580.159.04");
        assert!(report.unreadable.is_empty(), "{:?}", report.unreadable);
        assert_eq!(
            report.gpus,
            [Gpu {
                index: 0,
                uuid: "GPU-3c059e32-d2af-e569-c5ce-9601afee013c".into(),
                pci_bus_id: "00000000:00:06.0".into(),
                minor: Some(0),
                model: "NVIDIA H200".into(),
                ecc_volatile: Ecc {
                    correctable: Some(0),
                    uncorrectable: Some(0)
                },
                ecc_aggregate: Ecc {
                    correctable: Some(0),
                    uncorrectable: Some(0)
                },
                remapped_rows: Some(RemappedRows {
                    correctable: Some(0),
                    uncorrectable: Some(0),
                    pending: Some(false),
                    failure: Some(false),
                }),
                // Hopper has no page retirement: every field is N/A.
                retired_pages: None,
                // Idle, and nothing else.
                clock_event_reasons: Some(0x1),
                pcie_replays: Some(0),
                recovery_action: Some("None".into()),
                odd: Vec::new(),
            }]
        );
    }

    #[test]
    fn faults_read_from_their_fields() {
        let g = gpu(&faulted(
            "<remapped_row_unc>0</remapped_row_unc>",
            "<remapped_row_unc>2</remapped_row_unc>",
        ));
        assert_eq!(g.remapped_rows.unwrap().uncorrectable, Some(2));
        let g = gpu(&faulted(
            "<remapped_row_failure>No</remapped_row_failure>",
            "<remapped_row_failure>Yes</remapped_row_failure>",
        ));
        assert_eq!(g.remapped_rows.unwrap().failure, Some(true));
        let g = gpu(&faulted(
            "<remapped_row_pending>No</remapped_row_pending>",
            "<remapped_row_pending>Yes</remapped_row_pending>",
        ));
        assert_eq!(g.remapped_rows.unwrap().pending, Some(true));
        let g = gpu(&faulted(
            "<clocks_event_reason_hw_slowdown>Not Active",
            "<clocks_event_reason_hw_slowdown>Active",
        ));
        assert_eq!(g.clock_event_reasons, Some(0x1 | 0x8));
        // Volatile DRAM and SRAM counts add up; aggregate ones are their own.
        let g = gpu(&faulted(
            "<dram_uncorrectable>0</dram_uncorrectable>",
            "<dram_uncorrectable>3</dram_uncorrectable>",
        )
        .replacen(
            "<sram_uncorrectable_secded>0</sram_uncorrectable_secded>",
            "<sram_uncorrectable_secded>1</sram_uncorrectable_secded>",
            1,
        ));
        assert_eq!(g.ecc_volatile.uncorrectable, Some(4));
        assert_eq!(g.ecc_aggregate.uncorrectable, Some(0));
        let g = gpu(&faulted(
            "<replay_counter>0</replay_counter>",
            "<replay_counter>731</replay_counter>",
        ));
        assert_eq!(g.pcie_replays, Some(731));
    }

    #[test]
    fn a_disabled_ecc_and_missing_remapper_are_absent_not_zero() {
        let xml = h200();
        let start = xml.find("<ecc_errors>").unwrap();
        let end = xml.find("</ecc_errors>").unwrap();
        let mut disabled = String::from(&xml[..start]);
        disabled.push_str("<ecc_errors><volatile><sram_correctable>N/A</sram_correctable><dram_correctable>N/A</dram_correctable><dram_uncorrectable>N/A</dram_uncorrectable></volatile>");
        disabled.push_str(&xml[end..]);
        let start = disabled.find("<remapped_rows>").unwrap();
        let end = disabled.find("</remapped_rows>").unwrap();
        let disabled = format!(
            "{}<remapped_rows>N/A{}",
            &disabled[..start],
            &disabled[end..]
        );
        let g = gpu(&disabled);
        assert_eq!(g.ecc_volatile, Ecc::default());
        assert_eq!(g.ecc_aggregate, Ecc::default());
        assert_eq!(g.remapped_rows, None);
        let text = Collected::Report(parse(&disabled).unwrap()).render(1.0);
        assert!(!text.contains("hale_gpu_ecc_"), "{text}");
        assert!(!text.contains("hale_gpu_remapped_rows"), "{text}");
        assert!(text.contains("hale_gpu_clocks_event_reasons{"), "{text}");
    }

    /// A driver before 535: throttle reasons, single/double-bit totals, the
    /// blacklist, and a V100's retired pages.
    #[test]
    fn an_older_drivers_report_reads_the_same() {
        let old = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log>
  <driver_version>470.199.02</driver_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:3B:00.0">
    <product_name>Tesla V100-SXM2-32GB</product_name>
    <uuid>GPU-0d3e</uuid>
    <minor_number>3</minor_number>
    <pci><pci_bus_id>00000000:3B:00.0</pci_bus_id><replay_counter>2</replay_counter></pci>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
      <clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>
      <clocks_throttle_reason_hw_thermal_slowdown>Active</clocks_throttle_reason_hw_thermal_slowdown>
    </clocks_throttle_reasons>
    <ecc_errors>
      <volatile>
        <single_bit><device_memory>5</device_memory><total>7</total></single_bit>
        <double_bit><device_memory>1</device_memory><total>1</total></double_bit>
      </volatile>
      <aggregate>
        <single_bit><total>40</total></single_bit>
        <double_bit><total>2</total></double_bit>
      </aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>3</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
      <pending_blacklist>Yes</pending_blacklist>
    </retired_pages>
    <remapped_rows>N/A</remapped_rows>
  </gpu>
</nvidia_smi_log>"#;
        let g = gpu(old);
        assert_eq!(
            gpu_labels(&g),
            "gpu=\"0\",UUID=\"GPU-0d3e\",pci_bus_id=\"00000000:3B:00.0\",device=\"nvidia3\",modelName=\"Tesla V100-SXM2-32GB\""
        );
        assert_eq!(g.clock_event_reasons, Some(0x8 | 0x40));
        assert_eq!(
            g.ecc_volatile,
            Ecc {
                correctable: Some(7),
                uncorrectable: Some(1)
            }
        );
        assert_eq!(
            g.ecc_aggregate,
            Ecc {
                correctable: Some(40),
                uncorrectable: Some(2)
            }
        );
        assert_eq!(
            g.retired_pages,
            Some(RetiredPages {
                single_bit: Some(3),
                double_bit: Some(1),
                pending: Some(true)
            })
        );
        assert_eq!(g.remapped_rows, None);
        assert_eq!(g.pcie_replays, Some(2));
        // A pending field unread beside one that says Yes: pending all the same;
        // beside one that says No, not known.
        let with = |blacklist: &str| {
            old.replace(
                "<pending_blacklist>Yes</pending_blacklist>",
                &format!("<pending_blacklist>{blacklist}</pending_blacklist><pending_retirement>ERR!</pending_retirement>"),
            )
        };
        let pending = |xml: &str| gpu(xml).retired_pages.unwrap().pending;
        assert_eq!(pending(&with("Yes")), Some(true));
        assert_eq!(pending(&with("No")), None);
    }

    /// The H200 sample as a node with two of it: GPU 1 another copy at another
    /// address.
    fn two_gpus() -> String {
        let xml = h200().replacen("<attached_gpus>1<", "<attached_gpus>2<", 1);
        let start = xml.find("<gpu id=").unwrap();
        let end = xml.find("</gpu>").unwrap() + "</gpu>".len();
        let second = xml[start..end]
            .replace("00000000:00:06.0", "00000000:00:07.0")
            .replace("GPU-3c059e32", "GPU-7f11aa00")
            .replace("<minor_number>0<", "<minor_number>1<");
        format!("{}\n{second}{}", &xml[..end], &xml[end..])
    }

    #[test]
    fn a_gpu_that_errors_out_fails_the_collector_and_keeps_the_others() {
        let xml = two_gpus();
        let report = parse(&xml).unwrap();
        assert!(report.unreadable.is_empty(), "{:?}", report.unreadable);
        assert_eq!(report.gpus[1].pci_bus_id, "00000000:00:07.0");
        assert_eq!(report.gpus[1].minor, Some(1));

        // GPU 1's counters can no longer be read.
        let at = xml.rfind("<dram_uncorrectable>0<").unwrap();
        let lost = format!(
            "{}<dram_uncorrectable>Unknown Error<{}",
            &xml[..at],
            &xml[at + "<dram_uncorrectable>0<".len()..]
        );
        let report = parse(&lost).unwrap();
        assert_eq!(
            report.unreadable,
            ["GPU 1 (00000000:00:07.0): dram_uncorrectable is \"Unknown Error\""]
        );
        let collected = Collected::Report(report);
        let text = collected.render(1.0);
        assert!(
            text.contains("hale_gpu_collector_success{error=\"gpu_error\"} 0"),
            "{text}"
        );
        // GPU 0 is read in full; GPU 1 keeps what could be read.
        assert_eq!(text.matches("hale_gpu_info{").count(), 2, "{text}");
        assert!(
            text.contains("hale_gpu_ecc_volatile_uncorrectable_total{gpu=\"0\""),
            "{text}"
        );
        assert!(
            text.contains("hale_gpu_ecc_volatile_correctable_total{gpu=\"1\""),
            "{text}"
        );
        assert!(collected.problem().unwrap().contains("Unknown Error"));

        // Without its UUID nothing can be told about a GPU.
        let nameless = xml.replacen(
            "<uuid>GPU-7f11aa00-d2af-e569-c5ce-9601afee013c</uuid>",
            "<uuid>[GPU requires reset]</uuid>",
            1,
        );
        let report = parse(&nameless).unwrap();
        assert_eq!(
            report.unreadable,
            ["GPU 1 (00000000:00:07.0): uuid is \"[GPU requires reset]\""]
        );
        let text = Collected::Report(report).render(1.0);
        assert_eq!(text.matches("hale_gpu_info{").count(), 1, "{text}");

        // The driver counts two, the report lists one.
        let short = h200().replacen("<attached_gpus>1<", "<attached_gpus>2<", 1);
        let report = parse(&short).unwrap();
        assert_eq!(
            report.unreadable,
            ["the driver has 2 GPU(s), the report lists 1"]
        );
    }

    /// A field nvidia-smi printed neither a reading nor "N/A" in (`ERR!`, a
    /// permission it lacked) fails the run as a GPU error. An ECC total short of
    /// that part is not written: it would fall, which the rules read as a counter
    /// reset, and the next whole one rise, which they read as new errors. Each
    /// remapped-row field stands on its own.
    #[test]
    fn an_odd_field_is_a_gpu_error_and_never_part_of_a_total() {
        for (odd, said) in [
            ("ERR!", "ERR!"),
            ("Insufficient Permissions", "Insufficient Permissions"),
            ("18446744073709551616", "18446744073709551616"),
        ] {
            let xml = faulted(
                "<dram_uncorrectable>0</dram_uncorrectable>",
                &format!("<dram_uncorrectable>{odd}</dram_uncorrectable>"),
            );
            let report = parse(&xml).unwrap();
            assert_eq!(
                report.unreadable,
                [format!(
                    "GPU 0 (00000000:00:06.0): dram_uncorrectable is \"{said}\""
                )]
            );
            let g = &report.gpus[0];
            assert_eq!(g.ecc_volatile.uncorrectable, None, "{odd}");
            assert_eq!(g.ecc_volatile.correctable, Some(0), "{odd}");
            let text = Collected::Report(report).render(1.0);
            assert!(
                text.contains("hale_gpu_collector_success{error=\"gpu_error\"} 0"),
                "{text}"
            );
            assert!(
                !text.contains("hale_gpu_ecc_volatile_uncorrectable_total{"),
                "{text}"
            );
        }
        // "Unknown Error" in a part (said as such) spoils the total too.
        let lost = faulted(
            "<dram_uncorrectable>0</dram_uncorrectable>",
            "<dram_uncorrectable>Unknown Error</dram_uncorrectable>",
        );
        assert_eq!(gpu(&lost).ecc_volatile.uncorrectable, None);

        let xml = faulted(
            "<remapped_row_corr>0</remapped_row_corr>",
            "<remapped_row_corr>Insufficient Permissions</remapped_row_corr>",
        )
        .replacen(
            "<remapped_row_unc>0</remapped_row_unc>",
            "<remapped_row_unc>4</remapped_row_unc>",
            1,
        )
        .replacen(
            "<remapped_row_failure>No</remapped_row_failure>",
            "<remapped_row_failure>Yes</remapped_row_failure>",
            1,
        );
        let report = parse(&xml).unwrap();
        assert_eq!(
            report.gpus[0].remapped_rows,
            Some(RemappedRows {
                correctable: None,
                uncorrectable: Some(4),
                pending: Some(false),
                failure: Some(true),
            })
        );
        assert_eq!(
            report.unreadable,
            ["GPU 0 (00000000:00:06.0): remapped_row_corr is \"Insufficient Permissions\""]
        );
        let text = Collected::Report(report).render(1.0);
        assert!(text.contains("hale_gpu_row_remap_failure{"), "{text}");
        assert!(
            text.contains("hale_gpu_remapped_rows_uncorrectable_total{"),
            "{text}"
        );
        assert!(
            !text.contains("hale_gpu_remapped_rows_correctable_total{"),
            "{text}"
        );
    }

    /// The same for every other field read: a clock event reason (a mask short of
    /// one would hide a HW slowdown), PCIe replays, the driver's recovery action
    /// (never taken for an action to take). A reason N/A is left out of the mask.
    #[test]
    fn every_field_read_says_what_it_could_not_read() {
        let cases = [
            (
                "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>",
                "<clocks_event_reason_hw_slowdown>ERR!</clocks_event_reason_hw_slowdown>",
                "clocks_event_reason_hw_slowdown is \"ERR!\"",
            ),
            (
                "<replay_counter>0</replay_counter>",
                "<replay_counter>Insufficient Permissions</replay_counter>",
                "replay_counter is \"Insufficient Permissions\"",
            ),
            (
                "<gpu_recovery_action>None</gpu_recovery_action>",
                "<gpu_recovery_action>Insufficient Permissions</gpu_recovery_action>",
                "gpu_recovery_action is \"Insufficient Permissions\"",
            ),
        ];
        for (from, to, said) in cases {
            let report = parse(&faulted(from, to)).unwrap();
            assert_eq!(
                report.unreadable,
                [format!("GPU 0 (00000000:00:06.0): {said}")]
            );
            let g = gpu(&faulted(from, to));
            let text = Collected::Report(report).render(1.0);
            assert!(
                text.contains("hale_gpu_collector_success{error=\"gpu_error\"} 0"),
                "{text}"
            );
            if said.starts_with("clocks") {
                assert_eq!(g.clock_event_reasons, None);
            } else if said.starts_with("replay") {
                assert_eq!(g.pcie_replays, None);
            } else {
                assert_eq!(g.recovery_action, None);
                assert!(!text.contains("hale_gpu_recovery_action{"), "{text}");
            }
        }
        let g = gpu(&faulted(
            "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>",
            "<clocks_event_reason_hw_slowdown>N/A</clocks_event_reason_hw_slowdown>",
        ));
        assert_eq!(g.clock_event_reasons, Some(0x1));
        assert!(g.odd.is_empty(), "{:?}", g.odd);
    }

    /// A report that lists no GPU, and counts none it could not list: the driver
    /// sees none, as "No devices were found" says, wherever nvidia-smi says it.
    #[test]
    fn a_report_of_no_gpu_is_no_devices() {
        let start = h200().find("<gpu id=").unwrap();
        let end = h200().find("</gpu>").unwrap() + "</gpu>".len();
        let xml = h200();
        let empty = format!("{}{}", &xml[..start], &xml[end..]).replacen(
            "<attached_gpus>1<",
            "<attached_gpus>0<",
            1,
        );
        let none = Collected::from_run(Ok(empty));
        assert!(
            none.render(1.0)
                .contains("hale_gpu_collector_success{error=\"no_devices\"} 0"),
            "{none:?}"
        );
        assert_eq!(none.problem().unwrap(), "nvidia-smi's report lists no GPU");
        let on_stderr = Collected::from_run(Err(ToolFailure::Exited {
            message: "`nvidia-smi -q -x` exited with exit status: 6: No devices were found".into(),
            stdout: String::new(),
        }));
        assert!(
            on_stderr
                .render(1.0)
                .contains("hale_gpu_collector_success{error=\"no_devices\"} 0")
        );
        let endless = Collected::from_run(Err(ToolFailure::TooLarge("printed too much".into())));
        assert!(
            endless
                .render(1.0)
                .contains("hale_gpu_collector_success{error=\"unreadable\"} 0")
        );
    }

    #[test]
    fn a_field_this_does_not_read_may_be_unreadable() {
        let xml = h200();
        let at = xml.find("<fan_speed>").expect("the sample has a fan speed");
        let end = xml[at..].find("</fan_speed>").unwrap() + at;
        let fan = format!("{}<fan_speed>Unknown Error{}", &xml[..at], &xml[end..]);
        let report = parse(&fan).unwrap();
        assert!(report.unreadable.is_empty(), "{:?}", report.unreadable);
    }

    #[test]
    fn a_failed_run_keeps_the_report_it_printed_and_says_the_failure() {
        let exited = Collected::from_run(Err(ToolFailure::Exited {
            message: "`nvidia-smi -q -x` exited with exit status: 15: GPU is lost".into(),
            stdout: h200(),
        }));
        let text = exited.render(1.0);
        assert!(
            text.contains("hale_gpu_collector_success{error=\"gpu_error\"} 0"),
            "{text}"
        );
        assert!(text.contains("hale_gpu_info{"), "{text}");
        assert!(exited.problem().unwrap().contains("GPU is lost"));

        let none = Collected::from_run(Err(ToolFailure::Exited {
            message: "`nvidia-smi -q -x` exited with exit status: 6: No devices were found".into(),
            stdout: "No devices were found\n".into(),
        }));
        assert!(
            none.render(1.0)
                .contains("hale_gpu_collector_success{error=\"no_devices\"} 0")
        );
        let broken = Collected::from_run(Err(ToolFailure::Exited {
            message: "`nvidia-smi -q -x` exited with exit status: 9: NVIDIA-SMI has failed".into(),
            stdout:
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
                    .into(),
        }));
        assert!(
            broken
                .render(1.0)
                .contains("hale_gpu_collector_success{error=\"failed\"} 0")
        );
    }

    #[test]
    fn a_warning_before_the_report_is_skipped() {
        let warned = format!(
            "WARNING: infoROM is corrupted at gpu 0000:00:06.0\n{}",
            h200()
        );
        assert_eq!(parse(&warned).unwrap(), parse(&h200()).unwrap());
    }

    #[test]
    fn the_drivers_recovery_action_is_written_with_what_it_asks() {
        let labels = "gpu=\"0\",UUID=\"GPU-3c059e32-d2af-e569-c5ce-9601afee013c\",pci_bus_id=\"00000000:00:06.0\",device=\"nvidia0\",modelName=\"NVIDIA H200\"";
        let text = Collected::Report(parse(&h200()).unwrap()).render(1.0);
        let line = format!("hale_gpu_recovery_action{{{labels},action=\"None\"}} 0");
        assert!(text.lines().any(|l| l == line), "no {line} in {text}");
        let reset = faulted(
            "<gpu_recovery_action>None</gpu_recovery_action>",
            "<gpu_recovery_action>Reset</gpu_recovery_action>",
        );
        let text = Collected::Report(parse(&reset).unwrap()).render(1.0);
        let line = format!("hale_gpu_recovery_action{{{labels},action=\"Reset\"}} 1");
        assert!(text.lines().any(|l| l == line), "no {line} in {text}");
    }

    #[test]
    fn what_is_not_a_report_is_unreadable() {
        for (output, says) in [
            ("", "not XML"),
            ("No devices were found", "not XML"),
            ("<html/>", "the document is <html>"),
        ] {
            let c = Collected::from_run(Ok(output.into()));
            let Collected::Failed { error, message } = &c else {
                panic!("{output:?} read as {c:?}")
            };
            assert_eq!(*error, "unreadable");
            assert!(message.contains(says), "{message}");
        }
        // Cut short (the tool killed halfway through writing).
        let cut = &h200()[..4000];
        assert!(matches!(
            Collected::from_run(Ok(cut.into())),
            Collected::Failed {
                error: "unreadable",
                ..
            }
        ));
    }

    #[test]
    fn the_textfile_names_each_fact_once_per_gpu() {
        let text = Collected::Report(parse(&h200()).unwrap()).render(1764548586.5);
        let labels = "gpu=\"0\",UUID=\"GPU-3c059e32-d2af-e569-c5ce-9601afee013c\",pci_bus_id=\"00000000:00:06.0\",device=\"nvidia0\",modelName=\"NVIDIA H200\"";
        for line in [
            "hale_gpu_collector_timestamp_seconds 1764548586.500".to_string(),
            "hale_gpu_collector_success 1".to_string(),
            format!("hale_gpu_info{{{labels},driver_version=\"580.159.04\"}} 1"),
            format!("hale_gpu_ecc_volatile_uncorrectable_total{{{labels}}} 0"),
            format!("hale_gpu_remapped_rows_uncorrectable_total{{{labels}}} 0"),
            format!("hale_gpu_row_remap_pending{{{labels}}} 0"),
            format!("hale_gpu_row_remap_failure{{{labels}}} 0"),
            format!("hale_gpu_clocks_event_reasons{{{labels}}} 1"),
            format!("hale_gpu_pcie_replay_total{{{labels}}} 0"),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
        assert!(
            !text.contains("hale_gpu_retired_pages"),
            "Hopper has none: {text}"
        );
        // Each family declared once, before its samples.
        let declared: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let mut unique = declared.clone();
        unique.dedup();
        assert_eq!(declared, unique);
    }

    #[test]
    fn failures_write_why_and_no_driver_writes_no_verdict() {
        let timeout = Collected::from_run(Err(ToolFailure::Timeout("killed".into())));
        assert!(
            timeout
                .render(1.0)
                .contains("hale_gpu_collector_success{error=\"timeout\"} 0")
        );
        let failed = Collected::from_run(Err(ToolFailure::Failed("exit 9".into())));
        assert!(
            failed
                .render(1.0)
                .contains("hale_gpu_collector_success{error=\"failed\"} 0")
        );
        assert_eq!(failed.problem().as_deref(), Some("exit 9"));
        let none = Collected::from_run(Err(ToolFailure::Missing)).render(1.0);
        assert!(!none.contains("hale_gpu_collector_success"), "{none}");
        assert!(
            none.contains("hale_gpu_collector_timestamp_seconds 1.000"),
            "{none}"
        );
    }
}
