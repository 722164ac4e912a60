#!/usr/bin/env bash
# Validates packaging/kubernetes/*.yaml with kubectl, offline (no cluster here or in CI).
#
# `kubectl apply --dry-run=client` cannot run without an API server: it asks the server's
# discovery API which resource each kind is (the REST mapping) and then GETs the live
# object to compute the patch. `kubectl create --dry-run=client` needs only the mapping,
# which kubectl reads from its discovery cache (--cache-dir) when the cache is fresh:
# this script writes that cache for the four kinds the manifests use (the same documents
# an API server's /api and /apis answer) and points --server at a port nothing listens on,
# so nothing is contacted. With --validate=false (OpenAPI validation downloads the
# server's schema), this checks: every file is YAML kubectl parses into objects, each with
# apiVersion, kind and metadata.name, of a kind the API knows under that apiVersion, and
# prints them back. It does NOT check the fields against the API schema (a misspelt field
# passes here): tests/e2e/production_test.cc (Kubernetes.*) reads the manifests with
# yaml-cpp and checks the fields jobhost depends on — probes, ports, flags, config keys —
# against the binary itself.
#
# usage: kubernetes_test.sh MANIFEST_DIR WORK_DIR
# Exits 77 (ctest: skipped) without kubectl, unless JOBHOST_REQUIRE_KUBECTL=1 (.ci/run).
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: kubernetes_test.sh MANIFEST_DIR WORK_DIR" >&2; exit 2; }
manifests=$1 work=$2
if ! command -v kubectl >/dev/null; then
  if [[ ${JOBHOST_REQUIRE_KUBECTL:-0} == 1 ]]; then
    echo "FAIL: kubectl not found (JOBHOST_REQUIRE_KUBECTL=1): apt-get install kubernetes-client" >&2
    exit 1
  fi
  echo "kubectl not found (Debian: apt-get install kubernetes-client): skipping the manifest validation"
  exit 77
fi
kubectl version --client 2>/dev/null | head -n1 || true

rm -rf "$work"
server_host=127.0.0.1 server_port=9  # discard: nothing answers, nothing is asked
cache=$work/cache/discovery/${server_host}_${server_port}
mkdir -p "$cache/v1" "$cache/apps/v1"
cat >"$cache/servergroups.json" <<'JSON'
{"kind":"APIGroupList","apiVersion":"v1","groups":[
 {"name":"","versions":[{"groupVersion":"v1","version":"v1"}],"preferredVersion":{"groupVersion":"v1","version":"v1"}},
 {"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}}]}
JSON
cat >"$cache/v1/serverresources.json" <<'JSON'
{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[
 {"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["create","get","list","patch","update","delete"]},
 {"name":"secrets","singularName":"secret","namespaced":true,"kind":"Secret","verbs":["create","get","list","patch","update","delete"]},
 {"name":"services","singularName":"service","namespaced":true,"kind":"Service","verbs":["create","get","list","patch","update","delete"]}]}
JSON
cat >"$cache/apps/v1/serverresources.json" <<'JSON'
{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"apps/v1","resources":[
 {"name":"statefulsets","singularName":"statefulset","namespaced":true,"kind":"StatefulSet","verbs":["create","get","list","patch","update","delete"]}]}
JSON

kc=(kubectl --kubeconfig=/dev/null --server="http://${server_host}:${server_port}" --cache-dir="$work/cache" --request-timeout=5s)
if ! "${kc[@]}" create --dry-run=client --validate=false -f "$manifests" -o yaml >"$work/objects.yaml" 2>"$work/kubectl.err"; then
  cat "$work/kubectl.err" >&2
  echo "FAIL: kubectl create --dry-run=client rejected $manifests" >&2
  exit 1
fi
names=$("${kc[@]}" create --dry-run=client --validate=false -f "$manifests" -o name)
echo "$names"
expected="configmap/wordcount-config
secret/wordcount-s3
service/wordcount
statefulset.apps/wordcount"
if [[ $(sort <<<"$names") != "$(sort <<<"$expected")" ]]; then
  echo "FAIL: expected these objects:" >&2
  echo "$expected" >&2
  exit 1
fi
echo "PASS: kubectl create --dry-run=client accepts $(wc -l <<<"$names") objects in $manifests"
