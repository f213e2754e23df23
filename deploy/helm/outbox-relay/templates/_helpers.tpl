{{/* The chart's name, for the app.kubernetes.io/name label: nameOverride or the chart's. */}}
{{- define "outbox-relay.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's objects are named after it: fullnameOverride, or <release>-<name>, or the release name when it already says the name. */}}
{{- define "outbox-relay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "outbox-relay.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Every object's labels: commonLabels, then the chart's, which win. */}}
{{- define "outbox-relay.labels" -}}
{{- $chart := dict
  "app.kubernetes.io/name" (include "outbox-relay.name" .)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_") -}}
{{- toYaml (merge $chart (omit (deepCopy .Values.commonLabels) "app.kubernetes.io/component" "app.kubernetes.io/part-of")) -}}
{{- end -}}

{{/* The labels that select a component's pods: (list . "relay"). */}}
{{- define "outbox-relay.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "outbox-relay.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The relay's pods; the console's, migrate's and prune's have their own component. */}}
{{- define "outbox-relay.selector" -}}
{{- include "outbox-relay.selectorLabels" (list . "relay") -}}
{{- end -}}

{{/* A pod template's metadata: (list . "component" annotations). Labels: the selector's, then podLabels and commonLabels (the selector's win); annotations: the given ones, then podAnnotations. */}}
{{- define "outbox-relay.podMetadata" -}}
{{- $ := index . 0 -}}
{{- $labels := include "outbox-relay.selectorLabels" (list $ (index . 1)) | fromYaml -}}
labels:
  {{- toYaml (merge $labels (deepCopy $.Values.podLabels) (deepCopy $.Values.commonLabels)) | nindent 2 }}
{{- $annotations := merge (index . 2) (deepCopy $.Values.podAnnotations) }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The ServiceAccount of the chart's pods. */}}
{{- define "outbox-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "outbox-relay.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "outbox-relay.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret the URLs come from: the chart's own, or existingSecret. */}}
{{- define "outbox-relay.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "outbox-relay.fullname" .) -}}
{{- end -}}

{{/* An env entry read from a Secret: (list . "NAME" "secret" "key"), or with a fourth element true for an optional reference. */}}
{{- define "outbox-relay.secretEnv" -}}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ index . 2 }}
      key: {{ index . 3 }}
      {{- if and (gt (len .) 4) (index . 4) }}
      optional: true
      {{- end }}
{{- end -}}

{{/* The key of a job's database URL (field ownerStorageUrl or adminStorageUrl): its own when the chart's Secret has that URL, or when an existing Secret names a key for it; storageUrl's otherwise. */}}
{{- define "outbox-relay.urlKey" -}}
{{- $ := index . 0 -}}
{{- $field := index . 1 -}}
{{- if $.Values.secrets.existingSecret -}}
{{- index $.Values.secrets.keys $field | default $.Values.secrets.keys.storageUrl -}}
{{- else if index $.Values.secrets $field -}}
{{- index $.Values.secrets.keys $field -}}
{{- else -}}
{{- $.Values.secrets.keys.storageUrl -}}
{{- end -}}
{{- end -}}

{{/* The relay's settings from the Secret: the two URLs, then secrets.env (the chart's Secret, one key per name) or secrets.existingSecretEnv (optional references into yours). */}}
{{- define "outbox-relay.relaySecretEnv" -}}
{{- $name := include "outbox-relay.secretName" . -}}
{{ include "outbox-relay.secretEnv" (list . "STORAGE_URL" $name .Values.secrets.keys.storageUrl) }}
{{ include "outbox-relay.secretEnv" (list . "PUBLISHER_URL" $name .Values.secrets.keys.publisherUrl) }}
{{- if .Values.secrets.existingSecret }}
{{- range $k, $key := .Values.secrets.existingSecretEnv }}
{{ include "outbox-relay.secretEnv" (list $ $k $name $key true) }}
{{- end }}
{{- else }}
{{- range $k, $v := .Values.secrets.env }}
{{ include "outbox-relay.secretEnv" (list $ $k $name $k) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The restricted Pod Security Standard: the image's numeric user (Dockerfile USER 65532:65532). */}}
{{- define "outbox-relay.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "outbox-relay.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* terminationGracePeriodSeconds: set, or 15 s above SHUTDOWN_TIMEOUT (seconds or minutes, as 30s or 1m). */}}
{{- define "outbox-relay.grace" -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- else -}}
{{- $t := toString (.Values.config.SHUTDOWN_TIMEOUT | default "30s") -}}
{{- if regexMatch "^[0-9]+s$" $t -}}
{{- add (trimSuffix "s" $t | atoi) 15 -}}
{{- else if regexMatch "^[0-9]+m$" $t -}}
{{- add (mul (trimSuffix "m" $t | atoi) 60) 15 -}}
{{- else -}}
{{- fail (printf "config.SHUTDOWN_TIMEOUT %q: write it in whole seconds or minutes (30s, 1m), or set terminationGracePeriodSeconds above it" $t) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Settings that hold secrets go in the Secret, never in the ConfigMap. */}}
{{- define "outbox-relay.checkConfig" -}}
{{- range $k := list "HTTP_ADDR" "SERVER_PORT" -}}
{{- if hasKey $.Values.config $k -}}
{{- fail (printf "config.%s: the chart sets HTTP_ADDR=:8080, where its probes, Service and ServiceMonitor look; change service.port for another port outside the pod" $k) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := .Values.config -}}
{{- if or (hasSuffix "_URL" $k) (contains "PASSWORD" $k) (contains "SECRET" $k) (contains "TOKEN" $k) (contains "HEADERS" $k) -}}
{{- fail (printf "config.%s may hold a secret: set it under secrets (storageUrl, publisherUrl, env) or in existingSecret, not in config, which goes into a ConfigMap" $k) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.secrets.existingSecret .Values.secrets.env -}}
{{- fail "secrets.env fills the chart's Secret, which existingSecret replaces: name the keys of your Secret in secrets.existingSecretEnv instead" -}}
{{- end -}}
{{- range $k, $v := .Values.secrets.env -}}
{{- if has $k (list "STORAGE_URL" "PUBLISHER_URL" "HTTP_ADDR" "RELAY_ID") -}}
{{- fail (printf "secrets.env.%s: the chart sets %s itself (STORAGE_URL and PUBLISHER_URL: secrets.storageUrl and secrets.publisherUrl)" $k $k) -}}
{{- end -}}
{{- if hasKey $.Values.config $k -}}
{{- fail (printf "%s is both in config and in secrets.env: keep it in secrets.env" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* What every pod of the chart gets: no API token, pull secrets and placement. */}}
{{- define "outbox-relay.podPlacement" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* extraEnv, extraEnvFrom and extraVolumeMounts of every container: (list . "env"|"envFrom"|"volumeMounts"). */}}
{{- define "outbox-relay.extra" -}}
{{- $ := index . 0 -}}
{{- $v := dict "env" $.Values.extraEnv "envFrom" $.Values.extraEnvFrom "volumeMounts" $.Values.extraVolumeMounts -}}
{{- with index $v (index . 1) }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/* The relay's topologySpreadConstraints: yours, or with several replicas (or autoscaling) the chart's, across nodes and zones. */}}
{{- define "outbox-relay.topologySpread" -}}
{{- if .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml .Values.topologySpreadConstraints | nindent 2 }}
{{- else if and .Values.topologySpread.enabled (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) }}
topologySpreadConstraints:
  {{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
  - topologyKey: {{ . }}
    maxSkew: {{ $.Values.topologySpread.maxSkew }}
    whenUnsatisfiable: {{ $.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "outbox-relay.selector" $ | nindent 8 }}
    # Spread each rollout's pods, not the old and new ones together.
    matchLabelKeys: [pod-template-hash]
  {{- end }}
{{- end }}
{{- end -}}
