#!/usr/bin/env python3
"""Renders the chart for several value sets and checks what comes out, with the
real tools wherever one exists. Run by tests/helm.sh, which prepares the venv.

No helm binary can be installed here: helm-python-sdk binds Helm's Go SDK, so
lint, schema validation and rendering are Helm's own code. For each value set:

- Helm's strict lint, and a render (the schema is enforced by both);
- every manifest free of duplicate keys (PyYAML alone would keep the last);
- every built-in kind valid for Kubernetes 1.33, unknown fields rejected
  (kubernetes-validate --strict's code); a kind without a schema fails here
  instead of passing with a warning;
- ServiceMonitor and PrometheusRule against the schemas of helm/schemas/
  (check-jsonschema), derived from the prometheus-operator CRDs;
- the PrometheusRule's groups equal to rules/*.yml and alerts/*.yml as parsed
  from the repository, less disabled alerts, and accepted by promtool;
- hale.yaml from the ConfigMap accepted by the real `hale check-config`;
- the bundled Prometheus and Alertmanager configs by promtool and amtool;
- the objects agreeing with each other (selectors, ports, mounts, RBAC).

Value sets the schema or the templates must refuse are rendered and linted too.
"""

import copy
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "hale"
HALE = Path(os.environ.get("HALE", ROOT / "target" / "debug" / "hale"))
RELEASE, NAMESPACE = "hale", "hale-system"
KUBE_VERSION = "1.33"
CRD_SCHEMAS = {
    "ServiceMonitor": ROOT / "helm" / "schemas" / "servicemonitor_v1.json",
    "PrometheusRule": ROOT / "helm" / "schemas" / "prometheusrule_v1.json",
}
# The venv's, whether or not the venv is activated.
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
DISABLED_ALERT = "WorkerUptimeTooHigh"
RUNBOOK_BASE = "https://runbooks.example.com/hale"

# A kubeconfig for another cluster, as hale check-config reads one.
FAKE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
  - name: other
    cluster: {server: "https://other.example:6443"}
users:
  - name: hale
    user: {token: not-a-real-token}
contexts:
  - name: other
    context: {cluster: other, user: hale}
current-context: other
"""

# The contract of hale's Kubernetes adapter (DESIGN §13): (apiGroup, resource, verb).
CLUSTER_ACCESS = {
    ("", "nodes", v) for v in ("get", "list", "watch", "patch")
} | {
    ("", "nodes/status", "patch"),
    ("", "pods", "list"),
    ("", "pods/eviction", "create"),
    ("", "events", "create"),
    ("apps", "replicasets", "get"),
    ("apps", "statefulsets", "get"),
    ("batch", "jobs", "get"),
    ("cluster.x-k8s.io", "machines", "get"),
    ("cluster.x-k8s.io", "machines", "delete"),
    ("karpenter.sh", "nodeclaims", "get"),
    ("karpenter.sh", "nodeclaims", "delete"),
}
LEASE_ACCESS = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
# The Lease's reads and renewals name hale's own Lease; a create cannot be
# limited by name.
LEASE_NAMED = {"get", "update"}


class StrictLoader(yaml.CSafeLoader):
    """libyaml's safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load(text):
    return yaml.load(text, Loader=StrictLoader)


class Failure(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


@dataclass
class Case:
    name: str
    values: dict
    docs: list = field(default_factory=list)
    notes: str = ""

    def all(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind, name=None):
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        expect(len(found) == 1, f"{self.name}: expected one {kind} {name or ''}, found {len(found)}")
        return found[0]


# A configuration touching every section of hale.yaml, large numbers included,
# with the bundled monitoring and no API token (the Alertmanager then sends none).
FULL = {
    "replicaCount": 3,
    "monitoring": {"enabled": True},
    "apiToken": {"existingSecret": ""},
    "webhookSecrets": [{"name": "oncall", "existingSecret": "hale-oncall", "key": "secret"}],
    "config": {
        "cluster": "dc1",
        "apiTokenFile": None,
        "alertmanager": {"pollInterval": "15s", "staleAfter": "45s", "maxWebhookBytes": 8388608,
                         "maxAnswerBytes": 2147483648},
        "nodeIdentity": {"labels": ["node", "instance"], "stripPort": True},
        "nodeHealth": {"mode": "observe", "cordonBelow": 70, "penalties": {"SmartFailing": 30},
                       "defaultPenalty": {"info": 0, "warning": 5, "critical": 25}},
        "pools": [{"name": "gpu", "selector": {"pool": "gpu"}, "nodeHealth": {"drainBelow": 50}}],
        "store": {"eventRetentionDays": 30, "maxBytes": 10737418240},
        "nodeEventWebhooks": [{"url": "https://oncall.example.com/hale",
                               "secretFile": "/etc/hale/secrets/webhooks/oncall",
                               "events": ["SCORE_CHANGED", "HEARTBEAT_MISSED"]}],
        "inventory": [{"id": "bm-01", "hostname": "bm-01.dc1.example", "labels": {"pool": "gpu"}}],
        "orchestrator": {"kind": "kubernetes", "conditionPrefix": "Hale_", "conditionLinger": "48h",
                         "conditionHeartbeat": "5m", "evictionTimeout": "10m",
                         "lease": {"name": "hale-dc1", "duration": "20s"}},
    },
}

# Out-of-band remediation (DESIGN §8) in a cluster: BMC credentials from two
# Secrets (a default and one rack's), inventory BMCs over Redfish and IPMI, the
# reboot flow and fencing with every key set. No caFile: hale reads it as PEM at
# load, and the chart mounts none.
REMEDIATION = {
    "bmcSecrets": [{"name": "default", "existingSecret": "hale-bmc"},
                   {"name": "rack-12", "existingSecret": "hale-bmc-rack-12"}],
    "config": {
        "nodeHealth": {"mode": "drain"},
        "orchestrator": {"kind": "kubernetes"},
        "inventory": [
            {"id": "gpu-14", "labels": {"topology.kubernetes.io/zone": "r12"},
             "bmc": {"address": "redfish+https://10.1.0.14/redfish/v1/Systems/1",
                     "credentialsFile": "/etc/hale/secrets/bmc/rack-12", "insecure": True}},
            {"id": "gpu-15", "bmc": {"address": "ipmi://10.1.0.15:623"}},
        ],
        "bmc": {"credentialsFile": "/etc/hale/secrets/bmc/default", "cipherSuite": 3, "timeout": "10s",
                "gracefulTimeout": "1m30s", "addressTemplate": "ipmi://{hostname}-bmc:623"},
        "remediation": {
            "failureDomainLabel": "topology.kubernetes.io/zone", "domainsAtOnce": 1, "maxPerDomain": 2,
            "drainTimeout": "10m", "returnTimeout": "15m", "verifyTimeout": "10m", "retryAfter": "24h",
            "maxFailuresPerHour": 3,
            "blockingAlerts": [{"alertname": "CephHealthError"}, 'alertname=~"Etcd.*"'],
            "window": {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00", "end": "17:00",
                       "timeZone": "Europe/London"},
            "nodeTypes": [{"name": "control-plane", "selector": {"node-role.kubernetes.io/control-plane": ""},
                           "allowed": True, "maxPerDomain": 1,
                           "blockingAlerts": [{"alertname": "KubeAPIErrorBudgetBurn"}]}],
        },
        "fencing": {"after": "5m", "maxPercent": 10},
    },
}

# Federation, with reads closed (ui.requireToken, on the default API token): one
# member over https with its token and CA from two Secrets, one over http with
# neither.
FEDERATION = {
    "federationSecrets": [{"name": "west-token", "existingSecret": "hale-west-token", "key": "api-token"},
                          {"name": "west-ca", "existingSecret": "hale-west-tls", "key": "ca.crt"}],
    "config": {
        "cluster": "east",
        "ui": {"requireToken": True},
        "federation": {"timeout": "10s", "members": [
            {"name": "west", "url": "https://hale-west.example.com:9470",
             "tokenFile": "/etc/hale/secrets/federation/west-token",
             "caFile": "/etc/hale/secrets/federation/west-ca"},
            {"name": "lab", "url": "http://hale.hale-lab.svc:9470"},
        ]},
    },
}

# NATS credentials as nsc writes them: a JWT's shape and a user seed made for
# these checks (hale check-config parses the seed as serve does).
FAKE_CREDS = """\
-----BEGIN NATS USER JWT-----
eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln
------END NATS USER JWT------

-----BEGIN USER NKEY SEED-----
SUAAAAICAMCAKBQHBAEQUCYMBUHA6EARCIJRIFIWC4MBSGQ3DQOR4H776Y
------END USER NKEY SEED------
"""

# A self-signed certificate (its key thrown away) for every caFile, which hale
# reads as PEM at load.
TEST_CA = """\
-----BEGIN CERTIFICATE-----
MIIBlDCCATmgAwIBAgIURWld2/Uym7uHOExvkreHgCXg3UYwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTaGFsZSBjaGFydCBjaGVjayBDQTAgFw0yNjEyMDExNzMwNDha
GA8yMTI2MTEwNzE3MzA0OFowHjEcMBoGA1UEAwwTaGFsZSBjaGFydCBjaGVjayBD
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABH8GvtLoo2Y11hkI432IvGw4QZst
+X2x7wAZ3umhPKme8DiIBfosTr4Kvw3meu0sxM9T5+63Nv3+Az5b32j8WF2jUzBR
MB0GA1UdDgQWBBQ8hygKC0TUU42YAinZ5SFK2h1IWDAfBgNVHSMEGDAWgBQ8hygK
C0TUU42YAinZ5SFK2h1IWDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kA
MEYCIQCliunJjSqsRh6M87uCzf4ULpmKQFW5kpojM5eKMFJAdwIhANDMmZ0vzhAP
uvm1BNQPrIainYi6Sl6gHP+w1H6/+dn/
-----END CERTIFICATE-----
"""

CASES = [
    Case("defaults", {}),
    Case("monitoring", {"monitoring": {"enabled": True}}),
    Case("disabled-alert", {"prometheusRule": {"disabledAlerts": [DISABLED_ALERT]}}),
    # With a trailing slash, which must not end up doubled in the links.
    Case("runbook-base", {"prometheusRule": {"runbookUrlBase": RUNBOOK_BASE + "/"}}),
    Case("extras-off", {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
                        "dashboard": {"enabled": False}, "replicaCount": 1}),
    Case("full-config", FULL),
    Case("remediation", REMEDIATION),
    Case("federation", FEDERATION),
    # A persistent store: one writer, so the old pod stops before the new starts.
    Case("persistent-store", {"replicaCount": 1, "strategy": {"type": "Recreate"},
                              "storage": {"volume": {"persistentVolumeClaim": {"claimName": "hale-data"}}}}),
    Case("webhook-only", {"replicaCount": 1,
                          "serviceMonitor": {"interval": "1m30s", "scrapeTimeout": "1m"},
                          "config": {"alertmanager": {"url": None, "pollInterval": 0}}}),
    Case("dcgm-counters", {"dcgmExporter": {"counters": {"enabled": True, "namespace": "gpu-operator"}}}),
    # Two replicas in mode cordon with orchestrator none and no BMC: nothing acts
    # outside hale, so nothing acts twice.
    Case("cordon-without-bmc", {"config": {"nodeHealth": {"mode": "cordon"}}}),
    # A pool that acts while the cluster observes: NOTES names it.
    Case("pool-drains", {"config": {"orchestrator": {"kind": "kubernetes"}, "pools": [
        {"name": "gpu", "selector": {"pool": "gpu"}, "nodeHealth": {"mode": "drain"}}]}}),
    # Fuzzball on one replica, its token from a Secret.
    Case("fuzzball", {"replicaCount": 1, "logLevel": "Info,hale=Debug",
                      "orchestratorSecrets": [{"name": "fuzzball-token", "existingSecret": "hale-fuzzball",
                                               "key": "token"}],
                      "config": {"orchestrator": {"kind": "fuzzball", "url": "https://fuzzball.example.com/v4",
                                                  "tokenFile": "/etc/hale/secrets/orchestrator/fuzzball-token"}}}),
    # An Alertmanager behind its own TLS and basic auth.
    Case("alertmanager-tls", {"alertmanagerSecrets": [
                                  {"name": "password", "existingSecret": "hale-alertmanager", "key": "password"},
                                  {"name": "ca", "existingSecret": "alertmanager-tls", "key": "ca.crt"}],
                              "config": {"alertmanager": {
                                  "url": "https://alertmanager.monitoring.svc:9093",
                                  "caFile": "/etc/hale/secrets/alertmanager/ca",
                                  "basicAuth": {"username": "hale",
                                                "passwordFile": "/etc/hale/secrets/alertmanager/password"}}}}),
    # An Alertmanager behind kube-rbac-proxy, which takes the pod's own token.
    Case("alertmanager-rbac-proxy", {"config": {"alertmanager": {
        "url": "https://alertmanager-main.monitoring.svc:9095",
        "caFile": "/var/run/secrets/kubernetes.io/serviceaccount/service-ca.crt",
        "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}}),
    # The Lease in a namespace of its own: the Role that lets hale hold it is there.
    Case("lease-elsewhere", {"config": {"orchestrator": {"kind": "kubernetes",
                                                         "lease": {"name": "hale-dc1", "namespace": "kube-system"}}}}),
    # A kubeconfig for another cluster: hale's rights are that identity's there,
    # none here.
    Case("kubeconfig-elsewhere", {
        "orchestratorSecrets": [{"name": "kc", "existingSecret": "other-cluster", "key": "config"}],
        "config": {"orchestrator": {"kind": "kubernetes", "kubeconfig": "/etc/hale/secrets/orchestrator/kc"}}}),
    # The bundled Alertmanager sends to the receiver hale reads, by its name.
    Case("monitoring-receiver", {"monitoring": {"enabled": True},
                                 "config": {"alertmanager": {"receiver": "hale-prod"}}}),
    # A NATS that wants credentials and TLS, both from Secrets.
    Case("nats-credentials", {
        "replicaCount": 3,
        "natsSecrets": [{"name": "creds", "existingSecret": "hale-nats", "key": "hale.creds"},
                        {"name": "ca", "existingSecret": "nats-tls", "key": "ca.crt"}],
        "config": {"store": {"kind": "nats", "nats": {
            "urls": ["tls://nats.nats.svc:4222"], "credsFile": "/etc/hale/secrets/nats/creds",
            "tls": {"caFile": "/etc/hale/secrets/nats/ca"}}}}}),
    # Three replicas on an existing NATS (the official chart's Service): one
    # history, a leader elected on NATS, so webhooks are allowed.
    Case("nats-store", {
        "replicaCount": 3,
        "webhookSecrets": [{"name": "oncall", "existingSecret": "hale-oncall", "key": "secret"}],
        "config": {"store": {"kind": "nats", "nats": {"urls": ["nats://nats.nats.svc:4222"], "replicas": 3}},
                   "nodeEventWebhooks": [{"url": "https://oncall.example.com/hale",
                                          "secretFile": "/etc/hale/secrets/webhooks/oncall"}]}}),
]

# (name, values, what the error must say, whether lint reports it too). Lint
# reports schema violations; a template's `fail` only logs in Helm's lint mode,
# so those are caught by rendering.
REFUSED = [
    ("top-level typo", {"replicaCont": 3}, "additional properties 'replicaCont' not allowed", True),
    ("a claimed store on two replicas",
     {"strategy": {"type": "Recreate"}, "storage": {"volume": {"persistentVolumeClaim": {"claimName": "a"}}}},
     "a store has one writer: set replicaCount: 1 and strategy: {type: Recreate}", False),
    ("a claimed store in a rolling update",
     {"replicaCount": 1, "storage": {"volume": {"persistentVolumeClaim": {"claimName": "a"}}}},
     "a store has one writer: set replicaCount: 1 and strategy: {type: Recreate}", False),
    ("a host path store on two replicas", {"storage": {"volume": {"hostPath": {"path": "/var/lib/hale"}}}},
     "storage.volume.hostPath: one store for every pod that mounts it", False),
    ("an NFS store in a rolling update",
     {"replicaCount": 1, "storage": {"volume": {"nfs": {"server": "nfs.example", "path": "/hale"}}}},
     "storage.volume.nfs: one store for every pod that mounts it", False),
    ("an Alertmanager CA with the bundled monitoring",
     {"monitoring": {"enabled": True},
      "alertmanagerSecrets": [{"name": "ca", "existingSecret": "alertmanager-tls", "key": "ca.crt"}],
      "config": {"alertmanager": {"url": "https://alertmanager.monitoring.svc:9093",
                                  "caFile": "/etc/hale/secrets/alertmanager/ca"}}},
     "config.alertmanager.caFile with monitoring.enabled", False),
    ("a receiver named as the bundled Alertmanager's other",
     {"monitoring": {"enabled": True}, "config": {"alertmanager": {"receiver": "default"}}},
     "config.alertmanager.receiver default: the bundled Alertmanager", False),
    ("Kubernetes rights for the namespace's default account",
     {"serviceAccount": {"create": False}, "config": {"orchestrator": {"kind": "kubernetes"}}},
     "serviceAccount.create false with rbac.create and orchestrator kubernetes", False),
    ("two store volumes", {"storage": {"volume": {"persistentVolumeClaim": {"claimName": "a"},
                                                  "hostPath": {"path": "/var/lib/hale"}}}},
     "storage.volume: one volume source, not hostPath, persistentVolumeClaim", False),
    ("hale config typo", {"config": {"nodeHealth": {"cordnBelow": 50}}}, "cordnBelow", True),
    ("unknown orchestrator", {"config": {"orchestrator": {"kind": "nomad"}}}, "/config/orchestrator/kind", True),
    ("loopback listen", {"config": {"listen": "127.0.0.1:9470"}}, "a pod listens on all its addresses", False),
    ("unknown disabled alert", {"prometheusRule": {"disabledAlerts": ["NoSuchAlert"]}},
     "NoSuchAlert is not one of hale's alerts", False),
    ("token file without Secret", {"apiToken": {"existingSecret": ""}}, "apiToken.existingSecret is empty", False),
    ("webhooks on replicas without a leader",
     {"webhookSecrets": [{"name": "oncall", "existingSecret": "hale-oncall", "key": "secret"}],
      "config": {"nodeEventWebhooks": [{"url": "https://x.example/h",
                                        "secretFile": "/etc/hale/secrets/webhooks/oncall"}]}},
     "without a leader election every replica delivers", False),
    ("NATS store without servers", {"config": {"store": {"kind": "nats", "nats": {"urls": []}}}},
     "/config/store/nats/urls", True),
    ("unmounted NATS credentials",
     {"config": {"store": {"kind": "nats", "nats": {"urls": ["nats://nats:4222"], "credsFile": "/x"}}}},
     "config.store.nats.credsFile /x is not a mounted secret", False),
    ("an unmounted NATS CA",
     {"natsSecrets": [{"name": "creds", "existingSecret": "hale-nats", "key": "hale.creds"}],
      "config": {"store": {"kind": "nats", "nats": {"urls": ["tls://nats:4222"],
                                                     "tls": {"caFile": "/etc/hale/secrets/nats/ca"}}}}},
     "config.store.nats.tls.caFile /etc/hale/secrets/nats/ca is not a mounted secret", False),
    ("a NATS URL with credentials",
     {"config": {"store": {"kind": "nats", "nats": {"urls": ["nats://hale:s3cret@nats:4222"]}}}},
     "/config/store/nats/urls/0", True),
    ("an Alertmanager URL with credentials",
     {"config": {"alertmanager": {"url": "http://hale:s3cret@alertmanager:9093"}}},
     "/config/alertmanager/url", True),
    ("a store in /tmp", {"config": {"store": {"path": "/tmp"}}}, "config.store.path /tmp: the chart mounts /tmp there", False),
    ("a store among the secrets", {"config": {"store": {"path": "/etc/hale/secrets/store"}}},
     "the chart mounts /etc/hale there", False),
    ("a relative store path", {"config": {"store": {"path": "hale-data"}}}, "config.store.path hale-data: an absolute path", False),
    ("a pod label the chart selects by", {"podLabels": {"app.kubernetes.io/component": "api"}},
     "podLabels: app.kubernetes.io/component is the chart's own label", False),
    ("an unmounted kubeconfig", {"config": {"orchestrator": {"kind": "kubernetes", "kubeconfig": "/etc/hale/kubeconfig"}}},
     "config.orchestrator.kubeconfig /etc/hale/kubeconfig is not a mounted secret", False),
    ("port 0 to listen on", {"config": {"listen": "0.0.0.0:0"}}, "/config/listen", True),
    ("a port past 65535 to listen on", {"config": {"listen": "0.0.0.0:65536"}}, "/config/listen", True),
    ("no apiToken section", {"apiToken": None}, "missing property 'apiToken'", True),
    ("a key of another orchestrator kind", {"config": {"orchestrator": {"kind": "none", "conditionPrefix": "Hale"}}},
     "invalid propertyName 'conditionPrefix'", True),
    ("condition prefix with a space", {"config": {"orchestrator": {"kind": "kubernetes", "conditionPrefix": "Alert Manager"}}},
     "/config/orchestrator/conditionPrefix", True),
    ("unmounted webhook secret",
     {"config": {"nodeEventWebhooks": [{"url": "https://x.example/h", "secretFile": "/etc/hale/token"}]}},
     "is not a mounted secret", False),
    ("unmounted BMC credentials", {"config": {"bmc": {"credentialsFile": "/etc/hale/bmc/default"}}},
     "config.bmc.credentialsFile /etc/hale/bmc/default is not a mounted secret", False),
    ("an inventory BMC's unmounted credentials",
     {"bmcSecrets": [{"name": "default", "existingSecret": "hale-bmc"}],
      "config": {"inventory": [{"id": "n1", "bmc": {"address": "ipmi://n1-bmc:623",
                                                    "credentialsFile": "/etc/hale/secrets/bmc/other"}}]}},
     "config.inventory[0].bmc.credentialsFile /etc/hale/secrets/bmc/other is not a mounted secret", False),
    ("a BMC Secret named twice",
     {"bmcSecrets": [{"name": "default", "existingSecret": "a"}, {"name": "default", "existingSecret": "b"}]},
     "bmcSecrets: default is named twice", False),
    ("a BMC Secret without a name", {"bmcSecrets": [{"existingSecret": "hale-bmc"}]},
     "missing property 'name'", True),
    ("fencing typo", {"config": {"fencing": {"maxPercents": 10}}}, "maxPercents", True),
    ("reads closed without a token",
     {"apiToken": {"existingSecret": ""}, "config": {"apiTokenFile": None, "ui": {"requireToken": True}}},
     "config.ui.requireToken needs config.apiTokenFile", False),
    ("ui typo", {"config": {"ui": {"requiresToken": True}}}, "requiresToken", True),
    ("federation typo", {"config": {"federation": {"member": []}}}, "additional properties 'member' not allowed", True),
    ("a federation member without a url", {"config": {"federation": {"members": [{"name": "west"}]}}},
     "missing property 'url'", True),
    ("a federation member's URL with credentials",
     {"config": {"federation": {"members": [{"name": "west", "url": "https://hale:secret@west.example:9470"}]}}},
     "/config/federation/members/0/url", True),
    ("a CA for an http federation member",
     {"federationSecrets": [{"name": "west-ca", "existingSecret": "hale-west-tls", "key": "ca.crt"}],
      "config": {"federation": {"members": [{"name": "west", "url": "http://west.example:9470",
                                             "caFile": "/etc/hale/secrets/federation/west-ca"}]}}},
     "/config/federation/members/0/url", True),
    ("a federation timeout over 60s", {"config": {"federation": {"timeout": "61s"}}},
     "/config/federation/timeout", True),
    ("an unmounted federation token",
     {"config": {"federation": {"members": [{"name": "west", "url": "https://west.example:9470",
                                             "tokenFile": "/etc/hale/west-token"}]}}},
     "config.federation.members[0].tokenFile /etc/hale/west-token is not a mounted secret", False),
    ("an unmounted federation CA",
     {"federationSecrets": [{"name": "west-token", "existingSecret": "hale-west-token", "key": "api-token"}],
      "config": {"federation": {"members": [{"name": "west", "url": "https://west.example:9470",
                                             "tokenFile": "/etc/hale/secrets/federation/west-token",
                                             "caFile": "/etc/ssl/west-ca.pem"}]}}},
     "config.federation.members[0].caFile /etc/ssl/west-ca.pem is not a mounted secret", False),
    ("a federation Secret named twice",
     {"federationSecrets": [{"name": "west", "existingSecret": "a", "key": "token"},
                            {"name": "west", "existingSecret": "b", "key": "token"}]},
     "federationSecrets: west is named twice", False),
    ("acting replicas without a leader",
     {"bmcSecrets": [{"name": "default", "existingSecret": "hale-bmc"}],
      "config": {"nodeHealth": {"mode": "cordon"}, "bmc": {"credentialsFile": "/etc/hale/secrets/bmc/default"}}},
     "every replica would act on its own", False),
    ("a pool's acting replicas without a leader",
     {"config": {"pools": [{"name": "gpu", "selector": {"pool": "gpu"}, "nodeHealth": {"mode": "drain"}}],
                 "inventory": [{"id": "n1", "bmc": {"address": "redfish://n1-bmc/redfish/v1/Systems/1"}}]}},
     "every replica would act on its own", False),
    ("fencing replicas without a leader",
     {"config": {"fencing": {}, "inventory": [{"id": "n1", "bmc": {"address": "ipmi://n1-bmc:623"}}]}},
     "every replica would act on its own", False),
    ("replicas that never catch up", {"config": {"alertmanager": {"pollInterval": 0}}},
     "the others never see it", False),
    ("replicas that never catch up, in minutes", {"config": {"alertmanager": {"pollInterval": "0m"}}},
     "the others never see it", False),
    ("Lease replicas that never catch up",
     {"config": {"orchestrator": {"kind": "kubernetes"}, "alertmanager": {"pollInterval": "0s"}}},
     "the others never see it", False),
    ("Slurm on replicas without a leader", {"config": {"orchestrator": {"kind": "slurm"}}},
     "every replica would gate, cordon and drain through slurm", False),
    ("an unmounted Fuzzball token",
     {"replicaCount": 1, "config": {"orchestrator": {"kind": "fuzzball", "url": "https://f.example/v4",
                                                     "tokenFile": "/etc/hale/secrets/fuzzball-token"}}},
     "config.orchestrator.tokenFile /etc/hale/secrets/fuzzball-token is not a mounted secret", False),
    ("an unmounted Alertmanager password",
     {"config": {"alertmanager": {"basicAuth": {"username": "hale", "passwordFile": "/etc/hale/am-password"}}}},
     "config.alertmanager.basicAuth.passwordFile /etc/hale/am-password is not a mounted secret", False),
    ("an unmounted Alertmanager token",
     {"config": {"alertmanager": {"bearerTokenFile": "/etc/hale/am-token"}}},
     "config.alertmanager.bearerTokenFile /etc/hale/am-token is not a mounted secret", False),
    ("basic auth and a token for Alertmanager",
     {"alertmanagerSecrets": [{"name": "p", "existingSecret": "a", "key": "p"},
                              {"name": "t", "existingSecret": "a", "key": "t"}],
      "config": {"alertmanager": {"basicAuth": {"username": "hale", "passwordFile": "/etc/hale/secrets/alertmanager/p"},
                                  "bearerTokenFile": "/etc/hale/secrets/alertmanager/t"}}},
     "/config/alertmanager", True),
    ("Fuzzball without its URL", {"replicaCount": 1, "config": {"orchestrator": {"kind": "fuzzball"}}},
     "missing property 'url'", True),
    ("a Slurm key on Kubernetes", {"config": {"orchestrator": {"kind": "kubernetes", "slurmConf": "/etc/slurm.conf"}}},
     "slurmConf", True),
    ("the NATS store without its servers", {"config": {"store": {"kind": "nats"}}}, "missing property 'nats'", True),
    ("a host name to listen on", {"config": {"listen": "hale.example:9470"}}, "/config/listen", True),
    ("drain above cordon", {"config": {"nodeHealth": {"cordonBelow": 40, "drainBelow": 60}}},
     "drainBelow 60 is above cordonBelow 40", False),
    ("a pool's drain above the cluster's cordon",
     {"config": {"pools": [{"name": "gpu", "selector": {"pool": "gpu"}, "nodeHealth": {"drainBelow": 70}}]}},
     "config.pools[0].nodeHealth: drainBelow 70 is above cordonBelow 60", False),
    ("a pool named twice",
     {"config": {"pools": [{"name": "gpu", "selector": {"pool": "a"}}, {"name": "gpu", "selector": {"pool": "b"}}]}},
     "config.pools[1].name: pool gpu is defined twice", False),
    ("no Alertmanager to poll", {"config": {"alertmanager": None}},
     "config.alertmanager.url unset: hale would poll its own pod", False),
    ("a loopback Alertmanager", {"config": {"alertmanager": {"url": "http://localhost:9093"}}},
     "config.alertmanager.url http://localhost:9093: hale would poll its own pod", False),
    ("a scrape timeout past the interval", {"serviceMonitor": {"interval": "30s", "scrapeTimeout": "1m"}},
     "serviceMonitor.scrapeTimeout 1m is longer than serviceMonitor.interval 30s", False),
    ("a scrape interval without a unit", {"serviceMonitor": {"interval": "30"}},
     "/serviceMonitor/interval", True),
    ("a name no object may carry", {"nameOverride": "Hale_X"}, "/nameOverride", True),
    ("a full name over 63 characters", {"fullnameOverride": "h" * 64}, "/fullnameOverride", True),
    ("a webhook secret named twice",
     {"replicaCount": 1,
      "webhookSecrets": [{"name": "oncall", "existingSecret": "a", "key": "s"},
                         {"name": "oncall", "existingSecret": "b", "key": "s"}],
      "config": {"nodeEventWebhooks": [{"url": "https://x.example/h", "secretFile": "/etc/hale/secrets/webhooks/oncall"}]}},
     "webhookSecrets: oncall is named twice", False),
    ("a loopback listen in IPv6", {"config": {"listen": "[::ffff:127.0.0.1]:9470"}},
     "a pod listens on all its addresses", False),
    ("one address of the pod's", {"config": {"listen": "10.0.0.5:9470"}}, "a pod listens on all its addresses", False),
    ("a log level hale does not take", {"logLevel": "warning"}, "`warning` is no level", False),
    ("a log level hale does not take, among others", {"logLevel": " info , Warning"}, "`Warning` is no level", False),
    # The pod itself, in every spelling: capitals, unspecified, the long IPv6
    # form, decimal, hex, IPv6 zeros, IPv4-mapped, a bare 0.
    *[(f"an Alertmanager at {url}", {"config": {"alertmanager": {"url": url}}}, "hale would poll its own pod", False)
      for url in ("http://LOCALHOST:9093", "http://0.0.0.0:9093", "http://[0:0:0:0:0:0:0:1]:9093",
                  "http://2130706433:9093", "http://0x7f000001:9093", "http://[0::1]:9093",
                  "http://[::ffff:7f00:1]:9093", "http://0:9093")],
    ("a PDB with a leading zero", {"replicaCount": 3, "podDisruptionBudget": {"minAvailable": "09"}},
     "podDisruptionBudget.minAvailable 09", False),
    ("the dcgm counters named as the dashboards",
     {"dcgmExporter": {"counters": {"enabled": True, "name": f"{RELEASE}-dashboards"}}},
     "is one of the chart's own ConfigMaps", False),
    ("an empty kubeconfig", {"config": {"orchestrator": {"kind": "kubernetes", "kubeconfig": ""}}},
     "config.orchestrator.kubeconfig is empty", False),
    ("a lease name no object may carry", {"config": {"orchestrator": {"kind": "kubernetes", "lease": {"name": "kube-system/hale"}}}},
     "is not a Kubernetes object name", False),
    ("a full name no Service may carry", {"fullnameOverride": "9hale"}, "begins with a digit", False),
    ("a PDB no pod can pass", {"podDisruptionBudget": {"minAvailable": 2}}, "no hale pod could ever be evicted", False),
    ("a PDB of every pod", {"podDisruptionBudget": {"minAvailable": "100%"}}, "podDisruptionBudget.minAvailable 100%", False),
    ("a PDB of every pod, rounded up", {"podDisruptionBudget": {"minAvailable": "60%"}},
     "podDisruptionBudget.minAvailable 60% with replicaCount 2", False),
    ("the dcgm counters named as hale's configuration",
     {"dcgmExporter": {"counters": {"enabled": True, "name": RELEASE}}}, "is one of the chart's own ConfigMaps", False),
    ("the chart's own pod annotation", {"podAnnotations": {"checksum/config": "x"}},
     "podAnnotations: checksum/config is the chart's own annotation", False),
    ("the chart's own dashboard label", {"dashboard": {"labels": {"app.kubernetes.io/component": "x"}}},
     "dashboard.labels: app.kubernetes.io/component is the chart's own label", False),
    ("the namespace's default account", {"serviceAccount": {"create": True, "name": "default"}},
     "serviceAccount.name default", False),
    ("dcgm counters in a bad namespace", {"dcgmExporter": {"counters": {"enabled": True, "namespace": "GPU_Operator"}}},
     "/dcgmExporter/counters/namespace", True),
]


@functools.cache
def _source_groups():
    groups = []
    for d in ("rules", "alerts"):
        for f in sorted((ROOT / d).glob("*.yml")):
            groups += load(f.read_text())["groups"]
    return groups


def source_groups():
    """rules/*.yml then alerts/*.yml, as Prometheus would read them."""
    return copy.deepcopy(_source_groups())


def expected_groups(values):
    pr = values.get("prometheusRule", {})
    disabled = set(pr.get("disabledAlerts", []))
    base = pr.get("runbookUrlBase", "").rstrip("/")
    groups = []
    for g in source_groups():
        g["rules"] = [r for r in g["rules"] if r.get("alert") not in disabled]
        for r in g["rules"]:
            if base and "runbook_url" in r.get("annotations", {}):
                r["annotations"]["runbook_url"] = f"{base}/{r['annotations']['runbook_url'].rsplit('/', 1)[-1]}"
        if g["rules"]:
            groups.append(g)
    return groups


def alerts(groups):
    return {r["alert"] for g in groups for r in g["rules"] if "alert" in r}


def prometheus_templates(groups):
    return sum(len(re.findall(r"\{\{.*?\$labels\..*?\}\}", v))
               for g in groups for r in g["rules"] for v in r.get("annotations", {}).values())


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


# --- the checks of one rendered value set ------------------------------------


def check_render(case, chart):
    try:
        manifests = chart.render(case.values, name=RELEASE, namespace=NAMESPACE)
    except helm.HelmError as e:
        raise Failure(f"{case.name}: {e}") from None
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            case.notes = text
            continue
        try:
            case.docs += [d for d in yaml.load_all(text, Loader=StrictLoader) if d]
        except yaml.YAMLError as e:
            raise Failure(f"{case.name}: {path}: {e}") from None
    expect(case.docs, f"{case.name}: nothing rendered")
    expect(not case.all("Secret"), f"{case.name}: the chart must reference Secrets, never hold one")


def check_kubernetes_schemas(case, crd_dir):
    for i, doc in enumerate(case.docs):
        where = f"{case.name}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in CRD_SCHEMAS:
            (crd_dir / f"{doc['kind']}-{case.name}-{i}.json").write_text(json.dumps(doc))
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise Failure(f"{where}: {'.'.join(map(str, e.path))}: {e.message}") from None
        except kubernetes_validate.SchemaNotFoundError as e:
            raise Failure(f"{where}: {e.message}") from None


def check_hale_config(case, tmp):
    cm = case.one("ConfigMap", RELEASE)
    text = cm["data"]["hale.yaml"]
    config = load(text)
    values = helm_values(case)
    values_config = {**values["config"]}
    if values["monitoring"]["enabled"]:
        expect(config["alertmanager"]["url"] == f"http://{RELEASE}-alertmanager.{NAMESPACE}.svc:9093",
               f"{case.name}: hale does not poll the bundled Alertmanager: {config['alertmanager']}")
        values_config["alertmanager"] = {**values_config["alertmanager"], "url": config["alertmanager"]["url"]}
    expect(config == values_config, f"{case.name}: hale.yaml is not values.config:\n{text}")
    expect(not re.match(r"(127\.|localhost|\[::1\])", config["listen"]), f"{case.name}: hale listens on loopback")

    # The secret files only exist in the pod: point them at temporary files, each
    # BMC credentialsFile at a directory like the mounted Secret's, and each
    # caFile at a PEM certificate.
    secrets = tmp / f"secrets-{case.name}"
    secrets.mkdir()
    def faker(write):
        # Each match's file (or directory) made by `write`, its path put in.
        def fake(m):
            path = secrets / str(len(list(secrets.iterdir())))
            write(path)
            return f"{m.group(1)}{path}"
        return fake
    def bmc_dir(path):
        path.mkdir()
        (path / "username").write_text("admin\n")
        (path / "password").write_text("not-a-real-password\n")
    for keys, write in (
        # A user JWT and seed as nsc writes them: hale check-config reads the file.
        ("credsFile", lambda p: p.write_text(FAKE_CREDS)),
        ("apiTokenFile|secretFile|tokenFile|passwordFile|bearerTokenFile",
         lambda p: p.write_text("not-a-real-secret\n")),
        ("credentialsFile", bmc_dir),
        ("caFile", lambda p: p.write_text(TEST_CA)),
        ("kubeconfig", lambda p: p.write_text(FAKE_KUBECONFIG)),
    ):
        text = re.sub(rf"(?m)^(\s*(?:-\s+)?(?:{keys}):\s*)\S+", faker(write), text)
    local = text
    f = tmp / f"hale-{case.name}.yaml"
    f.write_text(local)
    # The image's programs hale runs (orchestrator.cli): stand-ins on PATH.
    image_bin = tmp / "image-bin"
    image_bin.mkdir(exist_ok=True)
    cli = image_bin / "fuzzball"
    cli.write_text("#!/bin/sh\nexit 0\n")
    cli.chmod(0o755)
    path = f"{image_bin}:{os.environ.get('PATH', '')}"
    r = run([HALE, "check-config", f], env={**os.environ, "RUST_BACKTRACE": "0", "PATH": path})
    expect(r.returncode == 0, f"{case.name}: hale check-config refused the chart's hale.yaml:\n{r.stdout}{r.stderr}\n{local}")


def helm_values(case):
    with helm.Chart.load(CHART) as chart:
        return chart.merge_values(case.values)


def check_deployment(case):
    values = helm_values(case)
    dep = case.one("Deployment", RELEASE)
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    want = ["hale", "serve", "--config", "/etc/hale/hale.yaml", "--log-format", values["logFormat"]]
    expect(c["command"] + c["args"] == want, f"{case.name}: hale runs {c['command'] + c['args']}")
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    expect(env.get("POD_NAME") == "metadata.name" and env.get("POD_NAMESPACE") == "metadata.namespace",
           f"{case.name}: POD_NAME/POD_NAMESPACE are not from the downward API: {c['env']}")
    expect(dep["spec"]["replicas"] == values["replicaCount"], f"{case.name}: replicas")

    sc, psc = c["securityContext"], pod["securityContext"]
    expect(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0, f"{case.name}: pod may run as root")
    expect(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
           and sc.get("capabilities", {}).get("drop") == ["ALL"], f"{case.name}: container securityContext {sc}")
    expect(c["resources"].get("requests") and c["resources"].get("limits"), f"{case.name}: resources unset")

    (port,) = c["ports"]
    listen_port = int(values["config"]["listen"].rsplit(":", 1)[1])
    expect(port == {"name": "http", "containerPort": listen_port, "protocol": "TCP"}, f"{case.name}: port {port}")
    routes = set(re.findall(r'\.route\(\s*"([^"]+)"', (ROOT / "bridge" / "src" / "http.rs").read_text()))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        expect(get["path"] in routes and get["port"] == "http",
               f"{case.name}: {probe} {get} is not one of hale's routes {sorted(routes)}")

    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    store = mounts.get(values["config"]["store"]["path"])
    source = {k: v for k, v in values["storage"]["volume"].items() if v is not None}
    if len(source) > 1:
        source.pop("emptyDir", None)
    expect(store and volumes[store["name"]] == {"name": store["name"], **source},
           f"{case.name}: store path is not on storage.volume")
    expect(dep["spec"].get("strategy", {}) == values["strategy"], f"{case.name}: strategy {dep['spec'].get('strategy')}")
    expect(mounts["/etc/hale/hale.yaml"]["subPath"] == "hale.yaml", f"{case.name}: config mount")
    secrets = mounts.get("/etc/hale/secrets")
    files = {}
    if secrets:
        expect(secrets.get("readOnly") is True, f"{case.name}: secrets mounted writable")
        for src in volumes[secrets["name"]]["projected"]["sources"]:
            for item in src["secret"]["items"]:
                files[f"/etc/hale/secrets/{item['path']}"] = (src["secret"]["name"], item["key"])
    wanted = {}
    if values["apiToken"]["existingSecret"]:
        wanted[values["config"]["apiTokenFile"]] = (values["apiToken"]["existingSecret"], values["apiToken"]["key"])
    for w in values["webhookSecrets"]:
        wanted[f"/etc/hale/secrets/webhooks/{w['name']}"] = (w["existingSecret"], w["key"])
    for b in values["bmcSecrets"]:
        for key in ("username", "password"):
            wanted[f"/etc/hale/secrets/bmc/{b['name']}/{key}"] = (b["existingSecret"], key)
    for s in values["federationSecrets"]:
        wanted[f"/etc/hale/secrets/federation/{s['name']}"] = (s["existingSecret"], s["key"])
    for s in values["orchestratorSecrets"]:
        wanted[f"/etc/hale/secrets/orchestrator/{s['name']}"] = (s["existingSecret"], s["key"])
    for s in values["alertmanagerSecrets"]:
        wanted[f"/etc/hale/secrets/alertmanager/{s['name']}"] = (s["existingSecret"], s["key"])
    for s in values["natsSecrets"]:
        wanted[f"/etc/hale/secrets/nats/{s['name']}"] = (s["existingSecret"], s["key"])
    expect(files == wanted, f"{case.name}: mounted secrets {files}, wanted {wanted}")
    for w in values["config"].get("nodeEventWebhooks", []):
        expect(w["secretFile"] in files, f"{case.name}: {w['secretFile']} is not mounted")
    bmcs = [values["config"].get("bmc", {})] + [n.get("bmc", {}) for n in values["config"].get("inventory", [])]
    for b in bmcs:
        if "credentialsFile" in b:
            for key in ("username", "password"):
                expect(f"{b['credentialsFile']}/{key}" in files,
                       f"{case.name}: {b['credentialsFile']} holds no mounted {key}")
    for m in values["config"].get("federation", {}).get("members", []):
        for key in ("tokenFile", "caFile"):
            if key in m:
                expect(m[key] in files, f"{case.name}: federation member {m['name']}'s {key} {m[key]} is not mounted")

    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    expect(term["topologyKey"] == "kubernetes.io/hostname"
           and term["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"],
           f"{case.name}: anti-affinity {term}")
    pdbs = case.all("PodDisruptionBudget")
    if values["replicaCount"] > 1:
        expect(len(pdbs) == 1 and pdbs[0]["spec"]["minAvailable"] == 1
               and pdbs[0]["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"],
               f"{case.name}: PodDisruptionBudget {pdbs}")
    else:
        expect(not pdbs, f"{case.name}: a PodDisruptionBudget for one replica blocks every drain")


def check_services(case):
    """Each Service selects the pods of exactly one Deployment, by a named port it has."""
    deployments = case.all("Deployment")
    for svc in case.all("Service"):
        name = svc["metadata"]["name"]
        chosen = [d for d in deployments if labels_match(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
        expect(len(chosen) == 1, f"{case.name}: Service {name} selects {[d['metadata']['name'] for d in chosen]}")
        ports = {p["name"] for c in chosen[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        for p in svc["spec"]["ports"]:
            expect(p["targetPort"] in ports, f"{case.name}: Service {name} targets port {p['targetPort']}, not in {ports}")
    hale_svc = case.one("Service", RELEASE)
    expect(hale_svc["spec"]["ports"][0]["port"] == 9470 and hale_svc["spec"]["ports"][0]["name"] == "http",
           f"{case.name}: hale's Service port")


def check_rbac(case):
    sa = case.one("ServiceAccount")["metadata"]["name"]
    expect(case.one("Deployment", RELEASE)["spec"]["template"]["spec"]["serviceAccountName"] == sa,
           f"{case.name}: the Deployment does not run as {sa}")
    orchestrator = helm_values(case)["config"].get("orchestrator") or {}
    # Only the Kubernetes orchestrator calls the API server: any other kind gets
    # no rights at all.
    # Nor does a kubeconfig's: it names another cluster, and identity, for every
    # call, the Lease's included.
    if orchestrator.get("kind", "none") != "kubernetes" or orchestrator.get("kubeconfig"):
        granted = [d["kind"] for d in case.docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
        expect(not granted, f"{case.name}: orchestrator {orchestrator.get('kind', 'none')} is granted {granted}")
        return
    lease_namespace = (orchestrator.get("lease") or {}).get("namespace") or NAMESPACE
    def access(role):
        return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
                for r in rule["resources"] for v in rule["verbs"]}
    cluster = access(case.one("ClusterRole"))
    expect(cluster == CLUSTER_ACCESS,
           f"{case.name}: ClusterRole differs from the adapter's contract: extra {sorted(cluster - CLUSTER_ACCESS)}, "
           f"missing {sorted(CLUSTER_ACCESS - cluster)}")
    lease = access(case.one("Role"))
    expect(lease == LEASE_ACCESS, f"{case.name}: Role grants {sorted(lease)}")
    lease_name = (orchestrator.get("lease") or {}).get("name") or "hale"
    for rule in case.one("Role")["rules"]:
        named = set(rule["verbs"]) <= LEASE_NAMED
        expect(rule.get("resourceNames") == ([lease_name] if named else None),
               f"{case.name}: the Lease rule {rule} should name {lease_name} exactly where it reads or renews")
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        b = case.one(kind)
        expect(b["roleRef"]["name"] == case.one(role_kind)["metadata"]["name"]
               and b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
               f"{case.name}: {kind} {b}")
    for kind in ("Role", "RoleBinding"):
        expect(case.one(kind)["metadata"]["namespace"] == lease_namespace,
               f"{case.name}: the Lease {kind} is not in the Lease's namespace, {lease_namespace}")


def check_notes(case):
    orchestrator = helm_values(case)["config"].get("orchestrator") or {}
    kind = orchestrator.get("kind", "none")
    config = helm_values(case)["config"]
    modes = {(config.get("nodeHealth") or {}).get("mode", "observe")} | {
        ((p.get("nodeHealth") or {}).get("mode") or (config.get("nodeHealth") or {}).get("mode", "observe"))
        for p in config.get("pools") or []}
    untouched = "changes nothing in the cluster" in case.notes
    expect(untouched == (kind == "none" and modes == {"observe"} and not isinstance(config.get("fencing"), dict)),
           f"{case.name}: NOTES, orchestrator {kind}, modes {modes}: {case.notes}")
    if kind != "none" and "mode observe" in case.notes:
        expect("scheduling gate" in case.notes or "Pools that act" in case.notes,
               f"{case.name}: NOTES does not say the gate acts in observe:\n{case.notes}")
    for pool in config.get("pools") or []:
        mode = (pool.get("nodeHealth") or {}).get("mode")
        if mode and mode != "observe":
            expect(f"{pool['name']} ({mode})" in case.notes, f"{case.name}: NOTES does not name pool {pool['name']}:\n{case.notes}")


def check_monitoring_objects(case):
    values = helm_values(case)
    kinds = {d["kind"] for d in case.docs}
    for enabled, kind in ((values["serviceMonitor"]["enabled"], "ServiceMonitor"),
                          (values["prometheusRule"]["enabled"], "PrometheusRule")):
        expect((kind in kinds) == enabled, f"{case.name}: {kind} {'missing' if enabled else 'rendered while disabled'}")
    dashboards = [d for d in case.all("ConfigMap") if labels_match({"grafana_dashboard": "1"}, d["metadata"]["labels"])]
    expect(len(dashboards) == int(values["dashboard"]["enabled"]), f"{case.name}: {len(dashboards)} dashboard ConfigMaps")
    for d in dashboards:
        for f in (ROOT / "dashboards").glob("*.json"):
            expect(json.loads(d["data"][f.name]) == json.loads(f.read_text()), f"{case.name}: dashboard {f.name} differs")

    counters = values["dcgmExporter"]["counters"]
    rendered = [d for d in case.all("ConfigMap") if d["metadata"]["name"] == counters["name"]]
    expect(len(rendered) == int(counters["enabled"]), f"{case.name}: {len(rendered)} dcgm-exporter counters ConfigMaps")
    for d in rendered:
        expect(d["metadata"]["namespace"] == (counters["namespace"] or NAMESPACE),
               f"{case.name}: dcgm-exporter counters in namespace {d['metadata']['namespace']}")
        csv = (ROOT / "examples" / "dcgm-exporter-counters.csv").read_text()
        expect(d["data"] == {"dcgm-metrics.csv": csv}, f"{case.name}: dcgm-metrics.csv is not examples/dcgm-exporter-counters.csv")

    if values["serviceMonitor"]["enabled"]:
        sm = case.one("ServiceMonitor")
        (ep,) = sm["spec"]["endpoints"]
        expect(ep["port"] == "http" and ep["path"] == "/metrics", f"{case.name}: ServiceMonitor endpoint {ep}")
        expect({"targetLabel": "job", "replacement": "hale"} in ep["relabelings"],
               f"{case.name}: ServiceMonitor does not name the job `hale`, which alerts/hale.yml reads")
        selected = [s["metadata"]["name"] for s in case.all("Service")
                    if labels_match(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        expect(selected == [RELEASE], f"{case.name}: ServiceMonitor selects Services {selected}")

    if values["prometheusRule"]["enabled"]:
        groups = case.one("PrometheusRule")["spec"]["groups"]
        want = expected_groups(values)
        if groups != want:
            got = {g["name"]: g for g in groups}
            diff = [g["name"] for g in want if got.get(g["name"]) != g] + sorted(set(got) - {g["name"] for g in want})
            raise Failure(f"{case.name}: PrometheusRule groups differ from rules/ and alerts/ in {diff}")
        n = prometheus_templates(groups)
        expect(n > 0 and n == prometheus_templates(want), f"{case.name}: {{{{ $labels }}}} templates lost")
        names = alerts(groups)
        if DISABLED_ALERT in values["prometheusRule"]["disabledAlerts"]:
            expect(DISABLED_ALERT not in names and names == alerts(source_groups()) - {DISABLED_ALERT},
                   f"{case.name}: disabling {DISABLED_ALERT} left {sorted(alerts(source_groups()) - names)} out")


def check_rules_promtool(case, tmp):
    for doc in case.all("PrometheusRule"):
        f = tmp / f"rules-{case.name}.yml"
        f.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}, sort_keys=False))
        r = run(["promtool", "check", "rules", f])
        expect(r.returncode == 0, f"{case.name}: promtool check rules:\n{r.stdout}{r.stderr}")


def check_bundled_monitoring(case, tmp):
    if not helm_values(case)["monitoring"]["enabled"]:
        expect(not any(d["metadata"]["name"].endswith(("-prometheus", "-alertmanager")) for d in case.docs),
               f"{case.name}: monitoring objects rendered while disabled")
        return
    d = tmp / f"monitoring-{case.name}"
    d.mkdir()
    prom = case.one("ConfigMap", f"{RELEASE}-prometheus")["data"]
    config = load(prom["prometheus.yml"])
    expect(config["rule_files"] == ["/etc/prometheus/hale-rules.yml"], f"{case.name}: rule_files {config['rule_files']}")
    expect(load(prom["hale-rules.yml"])["groups"] == expected_groups(helm_values(case)),
           f"{case.name}: the bundled Prometheus loads other rules than the PrometheusRule's")
    hale_job = [j for j in config["scrape_configs"] if j["job_name"] == "hale"]
    expect(len(hale_job) == 1, f"{case.name}: no single `hale` scrape job")
    pods = case.one("Service", f"{RELEASE}-pods")
    expect(hale_job[0]["dns_sd_configs"][0]["names"] == [f"{RELEASE}-pods.{NAMESPACE}.svc"]
           and pods["spec"]["clusterIP"] == "None" and pods["spec"]["publishNotReadyAddresses"] is True,
           f"{case.name}: Prometheus does not find every hale replica through a headless Service")
    (d / "hale-rules.yml").write_text(prom["hale-rules.yml"])
    config["rule_files"] = [str(d / "hale-rules.yml")]
    (d / "prometheus.yml").write_text(yaml.safe_dump(config))
    r = run(["promtool", "check", "config", d / "prometheus.yml"])
    expect(r.returncode == 0, f"{case.name}: promtool check config:\n{r.stdout}{r.stderr}")

    am_text = case.one("ConfigMap", f"{RELEASE}-alertmanager")["data"]["alertmanager.yml"]
    am = load(am_text)
    (d / "alertmanager.yml").write_text(am_text)
    r = run(["amtool", "check-config", d / "alertmanager.yml"])
    expect(r.returncode == 0, f"{case.name}: amtool check-config:\n{r.stdout}{r.stderr}")
    # The routing must stay that of examples/alertmanager.yml; only where the
    # webhook goes and where its token comes from differ.
    example = load((ROOT / "examples" / "alertmanager.yml").read_text())
    # hale's receiver is the one config.alertmanager.receiver names.
    receiver = helm_values(case)["config"]["alertmanager"].get("receiver", "hale")
    (hook,) = next(r for r in am["receivers"] if r["name"] == receiver)["webhook_configs"]
    for rcv in [*am["receivers"], *am["route"]["routes"]]:
        for key in ("name", "receiver"):
            if rcv.get(key) == receiver:
                rcv[key] = "hale"
    expect(hook["url"] == f"http://{RELEASE}.{NAMESPACE}.svc:9470/api/v1/alertmanager", f"{case.name}: webhook {hook['url']}")
    token = helm_values(case)["apiToken"]["existingSecret"]
    expect(("http_config" in hook) == bool(token), f"{case.name}: webhook token {hook.get('http_config')}")
    for cfg in (am, example):
        cfg.pop("global", None)
        for rcv in cfg["receivers"]:
            for h in rcv.get("webhook_configs", []):
                h.pop("url")
                h.pop("http_config", None)
    expect(am == example, f"{case.name}: the bundled Alertmanager's routing differs from examples/alertmanager.yml")


def check_crds(crd_dir):
    for kind, schema in CRD_SCHEMAS.items():
        files = sorted(crd_dir.glob(f"{kind}-*.json"))
        expect(files, f"no {kind} was rendered")
        r = run([CHECK_JSONSCHEMA, "--schemafile", schema, *files])
        expect(r.returncode == 0, f"check-jsonschema {schema.name}:\n{r.stdout}{r.stderr}")


def lint(values):
    """helm lint --strict. In lint mode Helm turns each template `fail` into a
    line on stderr and no finding; the renders catch those, so the noise goes."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            return helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}.0")
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check_refused(name, values, message, by_lint):
    with helm.Chart.load(CHART) as chart:
        try:
            chart.render(values, name=RELEASE, namespace=NAMESPACE)
        except helm.HelmError as e:
            expect(message in str(e), f"{name}: render failed, but not with {message!r}: {e}")
        else:
            raise Failure(f"{name}: {values} rendered")
    if by_lint:
        report = lint(values)
        expect(any(message in m["error"] for m in report["messages"] if m["severity"] >= 3),
               f"{name}: helm lint did not report {message!r}: {report['messages']}")


def check_lint(case):
    report = lint(case.values)
    # Severity 1 is advice (e.g. "icon is recommended"); strict lint fails on 2 and up.
    bad = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    expect(not bad, f"{case.name}: helm lint --strict: {bad}")


def main():
    start = time.monotonic()
    results = []

    def step(name, fn, *args):
        try:
            fn(*args)
            results.append((name, None))
        except Exception as e:  # a check that crashes on the output fails like one that rejects it
            message = str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"
            results.append((name, message))
            print(f"FAIL {name}\n    " + message.replace("\n", "\n    "), flush=True)

    step(f"{DISABLED_ALERT}, the alert disabled below, exists", expect,
         DISABLED_ALERT in alerts(source_groups()), f"{DISABLED_ALERT} is not in alerts/: pick another")

    with tempfile.TemporaryDirectory(prefix="hale-helm-") as t:
        tmp = Path(t)
        crd_dir = tmp / "crds"
        crd_dir.mkdir()
        with helm.Chart.load(CHART) as chart:
            for case in CASES:
                step(f"{case.name}: lint", check_lint, case)
                step(f"{case.name}: render", check_render, case, chart)
                if not case.docs:
                    continue
                for name, fn, *args in (
                    ("Kubernetes 1.33 schemas", check_kubernetes_schemas, crd_dir),
                    ("hale check-config", check_hale_config, tmp),
                    ("Deployment", check_deployment),
                    ("Services", check_services),
                    ("RBAC", check_rbac),
                    ("NOTES", check_notes),
                    ("PrometheusRule, ServiceMonitor, dashboard", check_monitoring_objects),
                    ("promtool check rules", check_rules_promtool, tmp),
                    ("bundled Prometheus and Alertmanager", check_bundled_monitoring, tmp),
                ):
                    step(f"{case.name}: {name}", fn, case, *args)
        step("CRD kinds against helm/schemas", check_crds, crd_dir)
    for name, values, message, by_lint in REFUSED:
        step(f"refused: {name}", check_refused, name, values, message, by_lint)

    failed = [n for n, e in results if e]
    print(f"helm: {len(results) - len(failed)} passed, {len(failed)} failed ({time.monotonic() - start:.1f}s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
