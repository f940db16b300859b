{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "serval-live.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "serval-live.fullname" -}}
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

{{/* Kept to 47 characters so that "-api-headless" and friends fit in 63. */}}
{{- define "serval-live.base" -}}
{{- include "serval-live.fullname" . | trunc 47 | trimSuffix "-" }}
{{- end }}

{{- define "serval-live.apiName" -}}{{ include "serval-live.base" . }}-api{{- end }}
{{- define "serval-live.apiHeadlessName" -}}{{ include "serval-live.base" . }}-api-headless{{- end }}
{{- define "serval-live.nodeName" -}}{{ include "serval-live.base" . }}-node{{- end }}
{{- define "serval-live.postgresqlName" -}}{{ include "serval-live.base" . }}-postgresql{{- end }}
{{- define "serval-live.secretName" -}}{{ include "serval-live.base" . }}{{- end }}

{{- define "serval-live.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "serval-live.base" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Labels ----------------------------------------------------------------------------- */}}

{{- define "serval-live.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "serval-live.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: serval-live
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "api") */}}
{{- define "serval-live.selectorLabels" -}}
app.kubernetes.io/name: {{ include "serval-live.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "serval-live.componentLabels" -}}
{{ include "serval-live.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Images: (dict "ctx" $ "image" .Values.api.image) */}}
{{- define "serval-live.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag | toString) }}
{{- end }}

{{/* Secrets ---------------------------------------------------------------------------- */}}

{{/* Secret name and key of the database URL, when the API service reads it from a Secret. */}}
{{- define "serval-live.databaseUrlSecret" -}}
{{- if .Values.database.existingSecret -}}
{{ dict "name" .Values.database.existingSecret "key" .Values.database.existingSecretKey | toJson }}
{{- else -}}
{{ dict "name" (include "serval-live.secretName" .) "key" "database-url" | toJson }}
{{- end }}
{{- end }}

{{- define "serval-live.postgresqlPasswordSecret" -}}
{{- if .Values.postgresql.auth.existingSecret -}}
{{ dict "name" .Values.postgresql.auth.existingSecret "key" .Values.postgresql.auth.existingSecretKey | toJson }}
{{- else -}}
{{ dict "name" (include "serval-live.postgresqlName" .) "key" "password" | toJson }}
{{- end }}
{{- end }}

{{- define "serval-live.nodeTokenSecret" -}}
{{- if .Values.node.token.existingSecret -}}
{{ dict "name" .Values.node.token.existingSecret "key" .Values.node.token.existingSecretKey | toJson }}
{{- else -}}
{{ dict "name" (include "serval-live.secretName" .) "key" "node-token" | toJson }}
{{- end }}
{{- end }}

{{/* Whether the chart's own Secret holds anything: values the user gave explicitly. */}}
{{- define "serval-live.hasOwnSecret" -}}
{{- if or (and (not .Values.postgresql.enabled) (not .Values.database.existingSecret) .Values.database.url) (and .Values.node.enabled (not .Values.node.token.existingSecret) .Values.node.token.value) -}}
true
{{- end }}
{{- end }}

{{- define "serval-live.tlsCaSecret" -}}
{{- default .Values.tls.existingSecret .Values.tls.caSecret }}
{{- end }}

{{- define "serval-live.tlsServerName" -}}
{{- default (include "serval-live.apiName" .) .Values.tls.serverName }}
{{- end }}

{{/* Model store URL. */}}
{{- define "serval-live.storeUrl" -}}
{{- if eq .Values.store.type "s3" -}}
{{- $prefix := trimAll "/" .Values.store.s3.prefix -}}
s3://{{ .Values.store.s3.bucket }}{{ if $prefix }}/{{ $prefix }}{{ end }}
{{- else -}}
file://{{ .Values.store.file.mountPath }}
{{- end }}
{{- end }}

{{- define "serval-live.storeClaimName" -}}
{{- default (printf "%s-store" (include "serval-live.base" .)) .Values.store.file.existingClaim }}
{{- end }}

{{/* Environment both the API service and the nodes need: logging and the model store. */}}
{{- define "serval-live.commonEnv" -}}
- name: SERVAL_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: SERVAL_LOG_LEVEL
  value: {{ .Values.log.level | quote }}
- name: SERVAL_STORE__URL
  value: {{ include "serval-live.storeUrl" . | quote }}
{{- if eq .Values.store.type "s3" }}
{{- with .Values.store.s3.endpointUrl }}
- name: SERVAL_STORE__S3_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.store.s3.region }}
- name: SERVAL_STORE__S3_REGION
  value: {{ . | quote }}
{{- end }}
{{- with .Values.store.s3.existingSecret }}
- name: SERVAL_STORE__S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.store.s3.accessKeyIdKey }}
- name: SERVAL_STORE__S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.store.s3.secretAccessKeyKey }}
{{- end }}
{{- end }}
{{- end }}

{{/* Checks ----------------------------------------------------------------------------- */}}

{{/* Every configuration problem at once, with what to set. */}}
{{- define "serval-live.validate" -}}
{{- $errors := list }}
{{- if and (not .Values.postgresql.enabled) (not .Values.database.url) (not .Values.database.existingSecret) }}
{{- $errors = append $errors "no database: set postgresql.enabled=true for the bundled PostgreSQL, or database.existingSecret (a Secret holding the SQLAlchemy URL under database.existingSecretKey) for an external one, or database.url" }}
{{- end }}
{{- if and .Values.postgresql.enabled (or .Values.database.url .Values.database.existingSecret) }}
{{- $errors = append $errors "two databases: postgresql.enabled=true and database.url/database.existingSecret are both set; choose one" }}
{{- end }}
{{- if and (eq .Values.store.type "s3") (not .Values.store.s3.bucket) }}
{{- $errors = append $errors "no model store: set store.s3.bucket (and store.s3.existingSecret for its keys), or store.type=file with a shared volume" }}
{{- end }}
{{- if and .Values.node.enabled (not .Values.node.token.existingSecret) (not .Values.node.token.value) }}
{{- $errors = append $errors "no node token: create one with `serval admin node-token create`, store it in a Secret and set node.token.existingSecret (see helm/README.md), or set node.enabled=false" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- $errors = append $errors "tls.enabled=true needs tls.existingSecret: a Secret holding the certificate (tls.certKey), key (tls.keyKey) and CA (tls.caKey)" }}
{{- end }}
{{- if and .Values.tls.enabled .Values.node.enabled (not .Values.tls.caKey) }}
{{- $errors = append $errors "tls.enabled=true with inference nodes needs tls.caKey: the key of tls.caSecret (default: the TLS Secret) holding the CA the nodes trust" }}
{{- end }}
{{- if eq .Values.jobs.launcher "clearml" }}
{{- if not .Values.jobs.clearml.jobApiAddress }}
{{- $errors = append $errors "jobs.launcher=clearml needs jobs.clearml.jobApiAddress: the gRPC host:port ClearML agents' jobs dial to reach the API service" }}
{{- end }}
{{- if eq .Values.store.type "file" }}
{{- $errors = append $errors "jobs.launcher=clearml needs store.type=s3: ClearML agents on other machines cannot reach a file store" }}
{{- end }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.rest.host) }}
{{- $errors = append $errors "ingress.enabled=true needs ingress.rest.host" }}
{{- end }}
{{- if and .Values.ingress.enabled .Values.ingress.grpc.enabled (not .Values.ingress.grpc.host) }}
{{- $errors = append $errors "ingress.grpc.enabled=true needs ingress.grpc.host" }}
{{- end }}
{{- if and (eq .Values.node.cache.type "existingClaim") (not .Values.node.cache.existingClaim) }}
{{- $errors = append $errors "node.cache.type=existingClaim needs node.cache.existingClaim" }}
{{- end }}
{{- if $errors }}
{{- fail (printf "\n\nserval-live: the values need attention:\n  - %s\n" (join "\n  - " $errors)) }}
{{- end }}
{{- end }}

{{/* The selector Prometheus expressions use for this release's API service. */}}
{{- define "serval-live.promSelector" -}}
namespace="{{ .Release.Namespace }}",job="{{ include "serval-live.apiName" . }}"
{{- end }}

{{- define "serval-live.hasMonitoringApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}
true
{{- end }}
{{- end }}

{{/* The bytes of a Kubernetes quantity: "50Gi", "512Mi", "16G", "1.5Gi", "100k", 1073741824. */}}
{{- define "serval-live.bytes" -}}
{{- $text := toString . -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?" $text -}}
{{- $suffix := trimPrefix $number $text -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 -}}
{{- if or (not $number) (not (hasKey $units $suffix)) -}}
{{- fail (printf "serval-live: %q is not a quantity of bytes (such as 50Gi, 512Mi or 16G)" $text) -}}
{{- end -}}
{{- mulf (float64 $number) (get $units $suffix) | floor | int64 -}}
{{- end }}

{{/* The node's memory budget (SERVAL_NODE__MEMORY_BUDGET_BYTES): `node.memoryBudgetBytes` when
set, else `node.memoryBudgetFraction` of what holds the models: one GPU's memory
(`node.gpu.memory`) on a GPU node that says it, else the container's memory limit (or request). */}}
{{- define "serval-live.nodeMemoryBudget" -}}
{{- $node := .Values.node -}}
{{- if not (kindIs "invalid" $node.memoryBudgetBytes) -}}
{{- int64 $node.memoryBudgetBytes -}}
{{- else -}}
{{- $basis := "" -}}
{{- $resources := default (dict) $node.resources -}}
{{- $limits := default (dict) $resources.limits -}}
{{- $requests := default (dict) $resources.requests -}}
{{- if and (gt (int $node.gpu.count) 0) $node.gpu.memory -}}
{{- $basis = $node.gpu.memory -}}
{{- else if $limits.memory -}}
{{- $basis = $limits.memory -}}
{{- else if $requests.memory -}}
{{- $basis = $requests.memory -}}
{{- end -}}
{{- if $basis -}}
{{- mulf (include "serval-live.bytes" $basis | float64) $node.memoryBudgetFraction | floor | int64 -}}
{{- else -}}
0
{{- end -}}
{{- end -}}
{{- end }}

{{/* The node's disk-cache budget (SERVAL_NODE__CACHE_BUDGET_BYTES): `node.cache.budgetBytes` when
set, else `node.cache.budgetFraction` of the cache volume's size (`node.cache.sizeLimit`: the
emptyDir's limit or the ephemeral claim's size), leaving room for a download in progress. A shared
existing claim gets no derived budget: every node trims it knowing only its own models. */}}
{{- define "serval-live.nodeCacheBudget" -}}
{{- $cache := .Values.node.cache -}}
{{- if not (kindIs "invalid" $cache.budgetBytes) -}}
{{- int64 $cache.budgetBytes -}}
{{- else if and (ne $cache.type "existingClaim") $cache.sizeLimit -}}
{{- mulf (include "serval-live.bytes" $cache.sizeLimit | float64) $cache.budgetFraction | floor | int64 -}}
{{- else -}}
0
{{- end -}}
{{- end }}
