{{/* Labels of one component's objects. The worker's per-endpoint NetworkPolicies find the
gateway and worker pods by name + component in their namespace
(deployments/drivers/kube/labels.py): keep them. */}}
{{- define "plinth.selector" -}}
app.kubernetes.io/name: plinth
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "plinth.labels" -}}
{{ include "plinth.selector" . }}
app.kubernetes.io/part-of: plinth
{{- end }}

{{- define "plinth.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* A value that names a Secret and a key, as an env entry. */}}
{{- define "plinth.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "%s: existingSecret is required" .name) .ref.existingSecret }}
      key: {{ required (printf "%s: key is required" .name) .ref.key }}
{{- end }}

{{/* The secrets every process reads, by reference. */}}
{{- define "plinth.secretEnvs" -}}
{{ include "plinth.secretEnv" (dict "name" "SECRET_KEY" "ref" .Values.secretKey) }}
{{ include "plinth.secretEnv" (dict "name" "PLINTH_ENCRYPTION_KEY" "ref" .Values.encryptionKey) }}
{{ include "plinth.secretEnv" (dict "name" "DATABASE_URL" "ref" .Values.postgresql.url) }}
{{ include "plinth.secretEnv" (dict "name" "REDIS_URL" "ref" .Values.redis.url) }}
{{- if .Values.oidcClientSecret.existingSecret }}
{{ include "plinth.secretEnv" (dict "name" "PLINTH_OIDC_CLIENT_SECRET" "ref" .Values.oidcClientSecret) }}
{{- end }}
{{- end }}

{{/* What a long-running component's pod template shares: its ServiceAccount, whose token is
mounted only for the worker (the one process that calls the Kubernetes API). */}}
{{- define "plinth.podSpec" -}}
serviceAccountName: plinth-{{ .component }}
automountServiceAccountToken: {{ eq .component "worker" }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* A changed plinth-config rolls the pods that read it. */}}
{{- define "plinth.configChecksum" -}}
checksum/config: {{ toJson .Values.config | sha256sum | trunc 16 }}
{{- end }}

{{- define "plinth.envFrom" -}}
envFrom:
  - configMapRef:
      name: plinth-config
env:
  {{- include "plinth.secretEnvs" . | nindent 2 }}
{{- end }}

{{/* monitors: auto renders them only where the Prometheus Operator's kinds are served. */}}
{{- define "plinth.monitors" -}}
{{- $m := .Values.monitoring.monitors -}}
{{- if eq (toString $m) "auto" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- else if $m -}}true{{- end -}}
{{- end }}
