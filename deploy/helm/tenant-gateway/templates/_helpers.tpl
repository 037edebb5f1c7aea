{{/*
Object names are fixed, not derived from the release name: the admission
policies recognise the gateway by its ServiceAccount's name (tenant-gateway),
`tenant-gateway check` looks its ClusterRole up by name, and the cluster-wide
objects (ClusterRoles, admission policies, FlowSchemas) exist once per
cluster. One release per cluster.
*/}}

{{/* Labels every object carries; the selector is app.kubernetes.io/name alone. */}}
{{- define "tenant-gateway.labels" -}}
app.kubernetes.io/name: tenant-gateway
{{- end }}

{{/* The image: the tag defaults to the chart's appVersion. */}}
{{- define "tenant-gateway.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Secret tenant-gateway-settings holds what values give in clear (database URL, session secret). */}}
{{- define "tenant-gateway.chartSecretName" -}}
tenant-gateway-settings
{{- end }}

{{/* Where GATEWAY_DATABASE_URL comes from: the chart's Secret when values hold the URL, else the named one. */}}
{{- define "tenant-gateway.databaseSecretRef" -}}
{{- if .Values.database.url -}}
{name: {{ include "tenant-gateway.chartSecretName" . }}, key: database-url}
{{- else -}}
{name: {{ .Values.database.existingSecret.name }}, key: {{ .Values.database.existingSecret.key }}}
{{- end }}
{{- end }}

{{- define "tenant-gateway.sessionSecretRef" -}}
{{- if .Values.sessionSecret.value -}}
{name: {{ include "tenant-gateway.chartSecretName" . }}, key: session-secret}
{{- else -}}
{name: {{ .Values.sessionSecret.existingSecret.name }}, key: {{ .Values.sessionSecret.existingSecret.key }}}
{{- end }}
{{- end }}

{{/* The public listener's port name and probe scheme: https when the gateway serves TLS itself (values: tls). */}}
{{- define "tenant-gateway.publicPort" -}}
{{ ternary "https" "http" (ne .Values.tls.secretName "") }}
{{- end }}
