#!/bin/sh
# Prints a kubeconfig for the ServiceAccount clusterset-dns/clusterset-dns-remote
# of a linked cluster (after `kubectl --context CTX apply -k deploy/remote`),
# for the local cluster's Link credentials Secret or clusters file:
#
#   deploy/remote/kubeconfig.sh --context CTX [--name NAME] [--server URL] > NAME.kubeconfig
#
# CTX is the linked cluster's context in your kubeconfig; NAME (default CTX)
# names the cluster, context and file; URL (default: the context's server)
# is the API server address as the LOCAL cluster's pods reach it. The token
# is the long-lived one of Secret clusterset-dns-remote-token; the CA is the
# cluster's, from the same Secret. Needs only kubectl and POSIX tools.
set -eu

kubectl=${KUBECTL:-kubectl}
context=
name=
server=

usage() {
    sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
        --context) [ $# -ge 2 ] || usage; context=$2; shift ;;
        --name) [ $# -ge 2 ] || usage; name=$2; shift ;;
        --server) [ $# -ge 2 ] || usage; server=$2; shift ;;
        -h | --help) usage ;;
        *) echo "kubeconfig.sh: unknown argument $1" >&2; usage ;;
    esac
    shift
done
[ -n "$context" ] || usage
name=${name:-$context}
case $name in
    *[!a-z0-9-]* | -* | *-) echo "kubeconfig.sh: '$name' is not a cluster name (a DNS label); use --name" >&2; exit 2 ;;
esac

if [ -z "$server" ]; then
    server=$("$kubectl" config view --raw --minify --context "$context" \
        -o 'jsonpath={.clusters[0].cluster.server}')
fi
case $server in
    https://*) ;;
    *) echo "kubeconfig.sh: API server '$server' is not an https:// URL; use --server" >&2; exit 1 ;;
esac
case $server in
    *[!]A-Za-z0-9.:/_[-]*) echo "kubeconfig.sh: unexpected characters in '$server'" >&2; exit 1 ;;
esac

# The token controller fills the Secret a moment after it is created.
tries=0
while :; do
    token=$("$kubectl" --context "$context" -n clusterset-dns get secret clusterset-dns-remote-token \
        -o 'go-template={{if .data.token}}{{.data.token | base64decode}}{{end}}')
    ca=$("$kubectl" --context "$context" -n clusterset-dns get secret clusterset-dns-remote-token \
        -o 'jsonpath={.data.ca\.crt}')
    case $token$ca in *[!A-Za-z0-9._=+/-]*) echo "kubeconfig.sh: unexpected token or CA" >&2; exit 1 ;; esac
    [ -n "$token" ] && [ -n "$ca" ] && break
    tries=$((tries + 1))
    if [ "$tries" -ge 30 ]; then
        echo "kubeconfig.sh: Secret clusterset-dns/clusterset-dns-remote-token has no token; did you apply deploy/remote?" >&2
        exit 1
    fi
    sleep 1
done

cat <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: $name
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: clusterset-dns-remote
    user:
      token: $token
contexts:
  - name: $name
    context:
      cluster: $name
      user: clusterset-dns-remote
current-context: $name
KUBECONFIG
