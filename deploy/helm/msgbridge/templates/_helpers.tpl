{{/* The release's base name: <release>-msgbridge, or the release alone when it already says msgbridge. */}}
{{- define "msgbridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "msgbridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* What selects a release's pods; with a component, one role's. Never changes across upgrades. */}}
{{- define "msgbridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "msgbridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{- define "msgbridge.labels" -}}
{{ include "msgbridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "msgbridge.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "msgbridge.businessesSecret" -}}
{{- default (printf "%s-businesses" (include "msgbridge.fullname" .)) .Values.businesses.existingSecret -}}
{{- end -}}

{{/* config.json: the chart's defaults and config, then what the chart sets from its own values. */}}
{{- define "msgbridge.configJson" -}}
{{- $v := .Values -}}
{{- $set := dict
  "kafka" (dict "brokers" $v.kafka.brokers)
  "ingress" (dict "host" "0.0.0.0" "port" (int $v.ingress.port) "adminHost" "0.0.0.0" "adminPort" (int $v.ingress.adminPort) "workers" $v.ingress.workers)
  "sender" (dict "adminHost" "0.0.0.0" "adminPort" (int $v.sender.adminPort))
  "tracker" (dict "host" "0.0.0.0" "port" (int $v.tracker.port) "adminHost" "0.0.0.0" "adminPort" (int $v.tracker.adminPort))
-}}
{{- mustMergeOverwrite (deepCopy $v.config) $set | toPrettyJson -}}
{{- end -}}

{{/* The environment every role shares: the configuration file, Kafka's TLS and SASL, the businesses file. */}}
{{- define "msgbridge.env" -}}
- name: MSGBRIDGE_CONFIG
  value: /etc/msgbridge/config.json
- name: MSGBRIDGE_BUSINESSES_FILE
  value: /var/run/secrets/msgbridge/businesses/{{ .Values.businesses.key }}
{{- with .Values.kafka.tls }}
{{- if .enabled }}
{{- if .caSecret.name }}
- name: KAFKA_SSL_CA_FILE
  value: /var/run/secrets/msgbridge/kafka/ca.crt
{{- end }}
{{- if .clientCertSecret.name }}
- name: KAFKA_SSL_CERT_FILE
  value: /var/run/secrets/msgbridge/kafka/tls.crt
- name: KAFKA_SSL_KEY_FILE
  value: /var/run/secrets/msgbridge/kafka/tls.key
{{- end }}
{{- if not (or .caSecret.name .clientCertSecret.name) }}
- name: KAFKA_SSL
  value: "true"
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.kafka.sasl }}
{{- if .enabled }}
- name: KAFKA_SASL_MECHANISM
  value: {{ .mechanism | quote }}
- name: KAFKA_SASL_USERNAME
  value: {{ required "kafka.sasl.username is required with kafka.sasl.enabled" .username | quote }}
- name: KAFKA_SASL_PASSWORD_FILE
  value: /var/run/secrets/msgbridge/kafka/sasl-password
{{- end }}
{{- end }}
{{- end -}}

{{- define "msgbridge.kafkaSecretsUsed" -}}
{{- if or (and .Values.kafka.tls.enabled (or .Values.kafka.tls.caSecret.name .Values.kafka.tls.clientCertSecret.name)) .Values.kafka.sasl.enabled -}}true{{- end -}}
{{- end -}}

{{- define "msgbridge.volumeMounts" -}}
- name: config
  mountPath: /etc/msgbridge
  readOnly: true
# A whole Secret volume (no subPath): the kubelet swaps the file on a change, and the roles reload it.
- name: businesses
  mountPath: /var/run/secrets/msgbridge/businesses
  readOnly: true
{{- if include "msgbridge.kafkaSecretsUsed" . }}
- name: kafka
  mountPath: /var/run/secrets/msgbridge/kafka
  readOnly: true
{{- end }}
{{- end -}}

{{- define "msgbridge.volumes" -}}
- name: config
  configMap:
    name: {{ include "msgbridge.fullname" . }}-config
- name: businesses
  secret:
    secretName: {{ include "msgbridge.businessesSecret" . }}
    items:
      - key: {{ .Values.businesses.key }}
        path: {{ .Values.businesses.key }}
{{- if include "msgbridge.kafkaSecretsUsed" . }}
- name: kafka
  projected:
    sources:
      {{- with .Values.kafka.tls }}
      {{- if and .enabled .caSecret.name }}
      - secret:
          name: {{ .caSecret.name }}
          items:
            - key: {{ .caSecret.key }}
              path: ca.crt
      {{- end }}
      {{- if and .enabled .clientCertSecret.name }}
      - secret:
          name: {{ .clientCertSecret.name }}
          items:
            - key: {{ .clientCertSecret.certKey }}
              path: tls.crt
            - key: {{ .clientCertSecret.keyKey }}
              path: tls.key
      {{- end }}
      {{- end }}
      {{- with .Values.kafka.sasl }}
      {{- if .enabled }}
      - secret:
          name: {{ required "kafka.sasl.passwordSecret.name is required with kafka.sasl.enabled" .passwordSecret.name }}
          items:
            - key: {{ .passwordSecret.key }}
              path: sasl-password
      {{- end }}
      {{- end }}
{{- end }}
{{- end -}}

{{/* Pod annotations: the configuration's checksum (a change rolls the pods) and the scrape annotations. */}}
{{- define "msgbridge.podAnnotations" -}}
checksum/config: {{ include "msgbridge.configJson" .root | sha256sum }}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .adminPort | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The three probes on the admin port. */}}
{{- define "msgbridge.probes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: {{ .readinessPeriod | default 10 }}
  failureThreshold: {{ .readinessFailures | default 3 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
  periodSeconds: 10
  failureThreshold: 3
{{- if .startupFailures }}
startupProbe:
  httpGet:
    path: /healthz
    port: admin
  periodSeconds: 2
  failureThreshold: {{ .startupFailures }}
{{- end }}
{{- end -}}
