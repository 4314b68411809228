{{/* The chart name, or nameOverride. */}}
{{- define "hale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release-qualified name of hale's own objects (Deployment, Service, ...). */}}
{{- define "hale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The full name with a suffix, still a valid DNS label (63 characters):
include "hale.suffixed" (list . "prometheus").
*/}}
{{- define "hale.suffixed" -}}
{{- $ctx := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "hale.fullname" $ctx | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{- define "hale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hale.labels" -}}
helm.sh/chart: {{ include "hale.chart" . }}
{{ include "hale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The release's pods. Every workload adds its app.kubernetes.io/component, so
that hale's Service never selects the bundled Prometheus or Alertmanager.
*/}}
{{- define "hale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hale.serverSelectorLabels" -}}
{{ include "hale.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "hale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hale.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hale.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The port of config.listen, which the container exposes. */}}
{{- define "hale.port" -}}
{{- splitList ":" (toString .Values.config.listen) | last | int }}
{{- end }}

{{- define "hale.alertmanagerUrl" -}}
{{- printf "http://%s.%s.svc:9093" (include "hale.suffixed" (list . "alertmanager")) .Release.Namespace }}
{{- end }}

{{/* A Prometheus duration (1m30s, 500ms), in milliseconds. */}}
{{- define "hale.ms" -}}
{{- $unit := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|[ywdhms])" (toString .) -1 }}
{{- $total = add $total (mul (regexReplaceAll "[a-z]+$" . "" | int64) (index $unit (regexReplaceAll "^[0-9]+" . ""))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
hale.yaml: values.config as written, except that the bundled monitoring stack,
when enabled, is the Alertmanager hale polls.
*/}}
{{- define "hale.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if .Values.monitoring.enabled }}
{{- $am := $config.alertmanager | default dict }}
{{- $_ := set $am "url" (include "hale.alertmanagerUrl" .) }}
{{- $_ = set $config "alertmanager" $am }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
Fails the render on the values that would make hale crash-loop: the keys of
values.config that must agree with how the pod is built. Renders nothing.
*/}}
{{- define "hale.validate" -}}
{{- $c := .Values.config }}
{{- $listen := toString ($c.listen | default "") }}
{{- if not $listen }}
{{- fail "config.listen must be set: hale's default, 127.0.0.1:9470, is unreachable from the Service and the probes" }}
{{- end }}
{{- /* A pod's own address is not known when the chart renders: it listens on
     every address of the pod (IPv4 or IPv6), or the Service and the probes
     cannot reach it. */}}
{{- if not (regexMatch "^(0\\.0\\.0\\.0|\\[::\\]):[0-9]+$" $listen) }}
{{- fail (printf "config.listen %s: a pod listens on all its addresses, or the Service and the probes may not reach it (a loopback one never; another the pod does not know it has); use 0.0.0.0:<port> or [::]:<port>" $listen) }}
{{- end }}
{{- if not .Values.monitoring.enabled }}
{{- $am := $c.alertmanager | default dict }}
{{- $amUrl := toString ($am.url | default "") }}
{{- $webhookOnly := and (hasKey $am "pollInterval") (regexMatch "^(0|(0+(ms|s|m|h|d|w|y))+)$" (toString (index $am "pollInterval"))) }}
{{- /* The URL's host, and whether it is the pod itself in any spelling: a
     loopback or unspecified IPv4 address in dotted, decimal, hex or octal form,
     localhost, or an IPv6 address of zeros (and a final 1), mapped or not. */}}
{{- $amHost := lower (regexReplaceAll "^[a-zA-Z]+://([^@/]*@)?(\\[[^\\]]*\\]|[^:/?#]*).*$" $amUrl "${2}") }}
{{- $loopback := or (regexMatch "^(localhost|localhost6|[^\\[]*\\.localhost)\\.?$" $amHost) (regexMatch "^(127\\.|0x|0[0-9.]|[0-9]+$)" $amHost) (regexMatch "^\\[([0:]*1?|[0:]*ffff:(127\\.|7f|0:|0\\.)[^\\]]*)\\]$" $amHost) }}
{{- if and (not $webhookOnly) (or (not $amUrl) $loopback) }}
{{- fail (printf "config.alertmanager.url %s: hale would poll its own pod, where no Alertmanager runs (hale's default is http://127.0.0.1:9093); set it to your Alertmanager's Service, enable the bundled monitoring, or set config.alertmanager.pollInterval to 0 for webhook deliveries alone" (default "unset" $amUrl)) }}
{{- end }}
{{- end }}
{{- if .Values.serviceMonitor.enabled }}
{{- $interval := include "hale.ms" .Values.serviceMonitor.interval | int64 }}
{{- $timeout := include "hale.ms" .Values.serviceMonitor.scrapeTimeout | int64 }}
{{- if gt $timeout $interval }}
{{- fail (printf "serviceMonitor.scrapeTimeout %s is longer than serviceMonitor.interval %s: Prometheus refuses such a scrape" .Values.serviceMonitor.scrapeTimeout .Values.serviceMonitor.interval) }}
{{- end }}
{{- end }}
{{- $token := $c.apiTokenFile | default "" }}
{{- if and $token (ne $token "/etc/hale/secrets/api-token") }}
{{- fail (printf "config.apiTokenFile %s: the token is mounted at /etc/hale/secrets/api-token" $token) }}
{{- end }}
{{- if and $token (not .Values.apiToken.existingSecret) }}
{{- fail "config.apiTokenFile is set but apiToken.existingSecret is empty: name the Secret that holds the token, or set config.apiTokenFile to null to run without one" }}
{{- end }}
{{- if and .Values.apiToken.existingSecret (not $token) }}
{{- fail "apiToken.existingSecret is set but config.apiTokenFile is not: hale would leave its API open; set config.apiTokenFile to /etc/hale/secrets/api-token" }}
{{- end }}
{{- if and (dig "ui" "requireToken" false $c) (not $token) }}
{{- fail "config.ui.requireToken needs config.apiTokenFile: readers sign in with the API token, and hale refuses requireToken without one; mount the token (apiToken.existingSecret, config.apiTokenFile /etc/hale/secrets/api-token) or set config.ui.requireToken to false" }}
{{- end }}
{{- $mounted := list }}
{{- range .Values.webhookSecrets }}
{{- $file := printf "/etc/hale/secrets/webhooks/%s" .name }}
{{- if has $file $mounted }}
{{- fail (printf "webhookSecrets: %s is named twice; each name is a file of its own" .name) }}
{{- end }}
{{- $mounted = append $mounted $file }}
{{- end }}
{{- range $i, $w := $c.nodeEventWebhooks | default list }}
{{- if not (has (toString $w.secretFile) $mounted) }}
{{- fail (printf "config.nodeEventWebhooks[%d].secretFile %s is not a mounted secret: add it to webhookSecrets and use /etc/hale/secrets/webhooks/<name>" $i (toString $w.secretFile)) }}
{{- end }}
{{- end }}
{{- $bmcDirs := list }}
{{- range .Values.bmcSecrets }}
{{- $dir := printf "/etc/hale/secrets/bmc/%s" .name }}
{{- if has $dir $bmcDirs }}
{{- fail (printf "bmcSecrets: %s is named twice; each name is a directory of its own" .name) }}
{{- end }}
{{- $bmcDirs = append $bmcDirs $dir }}
{{- end }}
{{- with ($c.bmc | default dict).credentialsFile }}
{{- if not (has (toString . | trimSuffix "/") $bmcDirs) }}
{{- fail (printf "config.bmc.credentialsFile %s is not a mounted secret: add it to bmcSecrets and use /etc/hale/secrets/bmc/<name>" (toString .)) }}
{{- end }}
{{- end }}
{{- range $i, $n := $c.inventory | default list }}
{{- with ($n.bmc | default dict).credentialsFile }}
{{- if not (has (toString . | trimSuffix "/") $bmcDirs) }}
{{- fail (printf "config.inventory[%d].bmc.credentialsFile %s is not a mounted secret: add it to bmcSecrets and use /etc/hale/secrets/bmc/<name>" $i (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $federationFiles := list }}
{{- range .Values.federationSecrets }}
{{- $file := printf "/etc/hale/secrets/federation/%s" .name }}
{{- if has $file $federationFiles }}
{{- fail (printf "federationSecrets: %s is named twice; each name is a file of its own" .name) }}
{{- end }}
{{- $federationFiles = append $federationFiles $file }}
{{- end }}
{{- range $i, $m := ($c.federation | default dict).members | default list }}
{{- range $key := list "tokenFile" "caFile" }}
{{- with index $m $key }}
{{- if not (has (toString .) $federationFiles) }}
{{- fail (printf "config.federation.members[%d].%s %s is not a mounted secret: add it to federationSecrets and use /etc/hale/secrets/federation/<name>" $i $key (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $orchestratorFiles := list }}
{{- range .Values.orchestratorSecrets }}
{{- $file := printf "/etc/hale/secrets/orchestrator/%s" .name }}
{{- if has $file $orchestratorFiles }}
{{- fail (printf "orchestratorSecrets: %s is named twice; each name is a file of its own" .name) }}
{{- end }}
{{- $orchestratorFiles = append $orchestratorFiles $file }}
{{- end }}
{{- range $key := list "tokenFile" "caFile" "kubeconfig" }}
{{- with index ($c.orchestrator | default dict) $key }}
{{- if not (has (toString .) $orchestratorFiles) }}
{{- fail (printf "config.orchestrator.%s %s is not a mounted secret: add it to orchestratorSecrets and use /etc/hale/secrets/orchestrator/<name>" $key (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $alertmanagerFiles := list }}
{{- range .Values.alertmanagerSecrets }}
{{- $file := printf "/etc/hale/secrets/alertmanager/%s" .name }}
{{- if has $file $alertmanagerFiles }}
{{- fail (printf "alertmanagerSecrets: %s is named twice; each name is a file of its own" .name) }}
{{- end }}
{{- $alertmanagerFiles = append $alertmanagerFiles $file }}
{{- end }}
{{- /* A proxy such as kube-rbac-proxy takes the pod's own token, its
       certificate signed by the cluster's (or OpenShift's service) CA. */}}
{{- range list "token" "ca.crt" "service-ca.crt" }}
{{- $alertmanagerFiles = append $alertmanagerFiles (printf "/var/run/secrets/kubernetes.io/serviceaccount/%s" .) }}
{{- end }}
{{- $amFiles := $c.alertmanager | default dict }}
{{- range $key, $file := dict "caFile" $amFiles.caFile "bearerTokenFile" $amFiles.bearerTokenFile "basicAuth.passwordFile" ($amFiles.basicAuth | default dict).passwordFile }}
{{- if and $file (not (has (toString $file) $alertmanagerFiles)) }}
{{- fail (printf "config.alertmanager.%s %s is not a mounted secret: add it to alertmanagerSecrets and use /etc/hale/secrets/alertmanager/<name> (or the pod's own /var/run/secrets/kubernetes.io/serviceaccount/token, ca.crt or service-ca.crt)" $key (toString $file)) }}
{{- end }}
{{- end }}
{{- $natsFiles := list }}
{{- range .Values.natsSecrets }}
{{- $file := printf "/etc/hale/secrets/nats/%s" .name }}
{{- if has $file $natsFiles }}
{{- fail (printf "natsSecrets: %s is named twice; each name is a file of its own" .name) }}
{{- end }}
{{- $natsFiles = append $natsFiles $file }}
{{- end }}
{{- $nats := (($c.store | default dict).nats | default dict) }}
{{- $natsTls := $nats.tls | default dict }}
{{- range $key, $file := dict "credsFile" $nats.credsFile "tls.caFile" $natsTls.caFile "tls.certFile" $natsTls.certFile "tls.keyFile" $natsTls.keyFile }}
{{- if and $file (not (has (toString $file) $natsFiles)) }}
{{- fail (printf "config.store.nats.%s %s is not a mounted secret: add it to natsSecrets and use /etc/hale/secrets/nats/<name>" $key (toString $file)) }}
{{- end }}
{{- end }}
{{- /* With the bundled monitoring, hale polls its Alertmanager (plain http,
     no authentication): the keys for reaching another have nothing to do. */}}
{{- if .Values.monitoring.enabled }}
{{- range $key := list "caFile" "bearerTokenFile" "basicAuth" }}
{{- if hasKey $amFiles $key }}
{{- fail (printf "config.alertmanager.%s with monitoring.enabled: hale polls the bundled Alertmanager, over http and without authentication; remove the key, or set monitoring.enabled to false to poll the Alertmanager it is for" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- $kind := (($c.orchestrator | default dict).kind | default "none") }}
{{- $storeKind := (($c.store | default dict).kind | default "sqlite") }}
{{- if and .Values.rbac.create (eq $kind "kubernetes") (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "serviceAccount.create false with rbac.create and orchestrator kubernetes: set serviceAccount.name; the chart will not bind hale's rights (Nodes, evictions, Machines) to the namespace's default account, which every pod that names none runs as" }}
{{- end }}
{{- $rbac := and .Values.rbac.create (eq $kind "kubernetes") (not ($c.orchestrator | default dict).kubeconfig) }}
{{- if and (eq (toString .Values.serviceAccount.name) "default") (or .Values.serviceAccount.create $rbac) }}
{{- fail "serviceAccount.name default: the namespace's own account, which every pod that names none runs as; the chart neither creates it again nor binds hale's rights to it — name another (or, creating none and binding none, leave the name empty)" }}
{{- end }}
{{- /* A Service's name begins with a letter (DNS-1035), as the Deployment's
     need not. */}}
{{- if not (regexMatch "^[a-z]" (include "hale.fullname" .)) }}
{{- fail (printf "the release's full name %s begins with a digit, which no Service name may: set fullnameOverride (or nameOverride, or a release name) beginning with a letter" (include "hale.fullname" .)) }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (gt (int $.Values.replicaCount) 1) }}
{{- $min := toString .minAvailable }}
{{- if not (regexMatch "^(0|[1-9][0-9]*|[0-9]%|[1-9][0-9]%)$" $min) }}
{{- fail (printf "podDisruptionBudget.minAvailable %s: a number of pods below replicaCount, or a percentage below 100%%" $min) }}
{{- end }}
{{- $replicas := int $.Values.replicaCount }}
{{- /* Kubernetes rounds a percentage up: 60% of 2 pods is both. */}}
{{- $pods := int $min }}
{{- if hasSuffix "%" $min }}
{{- $pods = div (add (mul (int (trimSuffix "%" $min)) $replicas) 99) 100 }}
{{- end }}
{{- if ge $pods $replicas }}
{{- fail (printf "podDisruptionBudget.minAvailable %s with replicaCount %d: no hale pod could ever be evicted, and every node drain that meets one would stall; keep it below replicaCount" $min $replicas) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.dcgmExporter.counters }}
{{- $own := list (include "hale.fullname" $) (include "hale.suffixed" (list $ "dashboards")) (include "hale.suffixed" (list $ "prometheus")) (include "hale.suffixed" (list $ "alertmanager")) }}
{{- if and .enabled (has (toString .name) $own) (eq (.namespace | default $.Release.Namespace) $.Release.Namespace) }}
{{- fail (printf "dcgmExporter.counters.name %s is one of the chart's own ConfigMaps (%s): name the counters' another" .name (join ", " $own)) }}
{{- end }}
{{- end }}
{{- /* HALE_LOG as hale reads it: each directive a level, `hale` or a module
     path, or target=level; a bare word other than those hale refuses at start. */}}
{{- range $d := splitList "," (toString .Values.logLevel) }}
{{- $d = trim $d }}
{{- if and $d (not (contains "=" $d)) (not (contains "[" $d)) (not (regexMatch "^((?i)trace|debug|info|warn|error|off|[0-5]|hale|[a-z_][a-z0-9_]*(::[a-z0-9_]+)+)$" $d)) }}
{{- fail (printf "logLevel %s: `%s` is no level (trace, debug, info, warn, error, off) and no module of hale's; another crate is written with its level, like kube=debug" (toString $.Values.logLevel) $d) }}
{{- end }}
{{- end }}
{{- $orch := $c.orchestrator | default dict }}
{{- if and (hasKey $orch "kubeconfig") (not $orch.kubeconfig) }}
{{- fail "config.orchestrator.kubeconfig is empty: leave it out for the pod's own service account, or name a mounted file (orchestratorSecrets)" }}
{{- end }}
{{- with ($orch.lease | default dict) }}
{{- if and .name (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" (toString .name))) }}
{{- fail (printf "config.orchestrator.lease.name %s is not a Kubernetes object name (lower case letters, digits, - and .)" (toString .name)) }}
{{- end }}
{{- if and .namespace (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString .namespace))) }}
{{- fail (printf "config.orchestrator.lease.namespace %s is not a namespace name (lower case letters, digits and -)" (toString .namespace)) }}
{{- end }}
{{- end }}
{{- range $key := list "checksum/config" }}
{{- if hasKey ($.Values.podAnnotations | default dict) $key }}
{{- fail (printf "podAnnotations: %s is the chart's own annotation (it restarts the pods when the configuration changes); use another key" $key) }}
{{- end }}
{{- end }}
{{- /* Replicas elect a leader on the Kubernetes Lease or on the shared store;
     otherwise each acts on its own. */}}
{{- if and (gt (int .Values.replicaCount) 1) (ne $kind "kubernetes") (ne $storeKind "nats") }}
{{- $none := printf "more than one replica with orchestrator %s and store sqlite: without a leader election" $kind }}
{{- $fix := "set replicaCount to 1, use orchestrator kubernetes, or the shared store (store.kind: nats), whose replicas elect a leader on NATS" }}
{{- if $c.nodeEventWebhooks }}
{{- fail (printf "config.nodeEventWebhooks with %s every replica delivers every event under its own id; %s" $none $fix) }}
{{- end }}
{{- if ne $kind "none" }}
{{- fail (printf "%s every replica would gate, cordon and drain through %s (the gate acts in observe too); %s" $none $kind $fix) }}
{{- end }}
{{- /* With none, only the BMC acts (the reboot flow, fencing): without one,
     a mode other than observe changes nothing outside hale. */}}
{{- $bmc := $c.bmc }}
{{- range ($c.inventory | default list) }}
{{- if .bmc }}{{ $bmc = true }}{{ end }}
{{- end }}
{{- $modes := list (($c.nodeHealth | default dict).mode | default "observe") }}
{{- range ($c.pools | default list) }}
{{- $modes = append $modes ((.nodeHealth | default dict).mode | default "observe") }}
{{- end }}
{{- $fencing := and (hasKey $c "fencing") (kindIs "map" (index $c "fencing")) }}
{{- if and $bmc (or (without $modes "observe") $fencing) }}
{{- fail (printf "a mode other than observe, or fencing, with a BMC and %s every replica would act on its own: a node rebooted or fenced once per replica; %s" $none $fix) }}
{{- end }}
{{- end }}
{{- /* Each replica on SQLite keeps its own state: with polling off, a webhook
     reaches one of them and the others (the Lease's leader among them) never
     see it. */}}
{{- if and (gt (int .Values.replicaCount) 1) (ne $storeKind "nats") }}
{{- $am := $c.alertmanager | default dict }}
{{- if and (hasKey $am "pollInterval") (regexMatch "^(0|(0+(ms|s|m|h|d|w|y))+)$" (toString (index $am "pollInterval"))) }}
{{- fail "alertmanager.pollInterval 0 with more than one replica and store sqlite: a webhook reaches one replica and the others never see it; set replicaCount to 1, keep polling on, or use the shared store (store.kind: nats)" }}
{{- end }}
{{- end }}
{{- /* Drain is the stronger step: it must trigger at a lower score than the
     cordon, in the cluster and in each pool (a pool's unset key is the
     cluster's). */}}
{{- $health := $c.nodeHealth | default dict }}
{{- $cordon := int (dig "cordonBelow" 60 $health) }}
{{- $drain := int (dig "drainBelow" 45 $health) }}
{{- if gt $drain $cordon }}
{{- fail (printf "config.nodeHealth: drainBelow %d is above cordonBelow %d: drain is the stronger step and must trigger lower" $drain $cordon) }}
{{- end }}
{{- $pools := list }}
{{- range $i, $p := ($c.pools | default list) }}
{{- if has $p.name $pools }}
{{- fail (printf "config.pools[%d].name: pool %s is defined twice" $i $p.name) }}
{{- end }}
{{- $pools = append $pools $p.name }}
{{- $ph := $p.nodeHealth | default dict }}
{{- $pc := int (dig "cordonBelow" $cordon $ph) }}
{{- $pd := int (dig "drainBelow" $drain $ph) }}
{{- if gt $pd $pc }}
{{- fail (printf "config.pools[%d].nodeHealth: drainBelow %d is above cordonBelow %d: drain is the stronger step and must trigger lower" $i $pd $pc) }}
{{- end }}
{{- end }}
{{- $storePath := toString (required "config.store.path must be set: the store volume is mounted there" ($c.store | default dict).path) | trimSuffix "/" }}
{{- if not (hasPrefix "/" $storePath) }}
{{- fail (printf "config.store.path %s: an absolute path, where the store volume is mounted (e.g. /var/lib/hale)" $storePath) }}
{{- end }}
{{- range list "/tmp" "/etc/hale" }}
{{- if or (eq $storePath .) (hasPrefix (printf "%s/" .) $storePath) (hasPrefix (printf "%s/" $storePath) .) (eq $storePath "") }}
{{- fail (printf "config.store.path %s: the chart mounts %s there; choose another (e.g. /var/lib/hale)" (toString $c.store.path) .) }}
{{- end }}
{{- end }}
{{- /* The labels that pick hale's pods are the chart's: one set again would
     change which pods the Deployment and the Services select. */}}
{{- range $what, $labels := dict "podLabels" .Values.podLabels "serviceMonitor.additionalLabels" .Values.serviceMonitor.additionalLabels "prometheusRule.additionalLabels" .Values.prometheusRule.additionalLabels "dashboard.labels" .Values.dashboard.labels }}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "helm.sh/chart" }}
{{- if hasKey ($labels | default dict) $key }}
{{- fail (printf "%s: %s is the chart's own label (it picks hale's pods); use another key" $what $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The rule groups of files/rules and files/alerts (copies of the repository's
rules/ and alerts/, made by helm/generate.py), less prometheusRule.disabledAlerts,
with runbook links rebased on prometheusRule.runbookUrlBase. The groups go
through fromYaml and toYaml as data, never through the template engine again,
so Prometheus's own {{ $labels.x }} templates in annotations reach Prometheus
unchanged.
*/}}
{{- define "hale.ruleGroups" -}}
{{- $disabled := .Values.prometheusRule.disabledAlerts }}
{{- $runbookBase := .Values.prometheusRule.runbookUrlBase | trimSuffix "/" }}
{{- $known := list }}
{{- $groups := list }}
{{- range $dir := list "rules" "alerts" }}
{{- range $path, $_ := $.Files.Glob (printf "files/%s/*.yml" $dir) }}
{{- range $group := ($.Files.Get $path | fromYaml).groups }}
{{- $rules := list }}
{{- range $rule := $group.rules }}
{{- if $rule.alert }}
{{- $known = append $known $rule.alert }}
{{- if and $runbookBase $rule.annotations $rule.annotations.runbook_url }}
{{- $_ := set $rule.annotations "runbook_url" (printf "%s/%s" $runbookBase (base $rule.annotations.runbook_url)) }}
{{- end }}
{{- end }}
{{- if not (and $rule.alert (has $rule.alert $disabled)) }}
{{- $rules = append $rules $rule }}
{{- end }}
{{- end }}
{{- if $rules }}
{{- $groups = append $groups (set $group "rules" $rules) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $disabled }}
{{- if not (has . $known) }}
{{- fail (printf "prometheusRule.disabledAlerts: %s is not one of hale's alerts" .) }}
{{- end }}
{{- end }}
{{- toYaml $groups }}
{{- end }}
