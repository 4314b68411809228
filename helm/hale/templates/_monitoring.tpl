{{/*
prometheus.yml of the bundled Prometheus (monitoring.enabled), in the shape of
examples/prometheus.yml: the rules and alerts, the bundled Alertmanager, hale.
*/}}
{{- define "hale.prometheusConfig" -}}
global:
  scrape_interval: 15s
  evaluation_interval: 15s
rule_files:
  - /etc/prometheus/hale-rules.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: [{{ include "hale.suffixed" (list . "alertmanager") }}:9093]
scrape_configs:
  # Every hale replica, through the headless Service's DNS records (no
  # Kubernetes API access needed). No `node` or `cluster` target label:
  # hale's own alerts must name no node, and its node series carry their
  # own `cluster` (examples/prometheus.yml).
  - job_name: hale
    dns_sd_configs:
      - names: [{{ include "hale.suffixed" (list . "pods") }}.{{ .Release.Namespace }}.svc]
        type: A
        port: {{ include "hale.port" . }}
{{- with .Values.monitoring.prometheus.extraScrapeConfigs }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
alertmanager.yml of the bundled Alertmanager: the routing of
examples/alertmanager.yml (explained there), with hale's Service as the webhook
and the token from apiToken.existingSecret.
*/}}
{{- define "hale.alertmanagerConfig" -}}
{{- /* The receiver hale reads (config.alertmanager.receiver). */}}
{{- $receiver := ((.Values.config.alertmanager | default dict).receiver | default "hale") }}
{{- if has $receiver (list "default" "blackhole") }}
{{- fail (printf "config.alertmanager.receiver %s: the bundled Alertmanager (monitoring.enabled) has a receiver of that name for other alerts; name hale's another" $receiver) }}
{{- end }}
route:
  receiver: default
  group_by: [alertname, cluster]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  routes:
    - receiver: {{ $receiver | quote }}
      continue: true
      group_by: [node]
      group_wait: 0s
      group_interval: 10s
      repeat_interval: 30s
    - receiver: blackhole
      matchers:
        - hale_signal=~"watchdog|heartbeat|unavailable"
    - receiver: default
inhibit_rules:
  - source_matchers: [alertname="HaleNodeScoreBelowDrain"]
    target_matchers: [alertname="HaleNodeScoreBelowCordon"]
    equal: [cluster, node_id]
receivers:
  - name: default
  - name: blackhole
  - name: {{ $receiver | quote }}
    webhook_configs:
      - url: http://{{ include "hale.fullname" . }}.{{ .Release.Namespace }}.svc:{{ .Values.service.port }}/api/v1/alertmanager
        send_resolved: true
        max_alerts: 0
        {{- if .Values.apiToken.existingSecret }}
        http_config:
          authorization:
            type: Bearer
            credentials_file: /etc/alertmanager/secrets/api-token
        {{- end }}
{{- end }}
