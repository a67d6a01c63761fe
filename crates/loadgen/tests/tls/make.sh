#!/bin/sh
# Makes the test certificates of tests/tls.rs (committed; run again only to change them):
# a root CA, a leaf for localhost and 127.0.0.1 signed by it (ECDSA P-256, valid 100 years),
# and a second, unrelated CA (the "wrong CA" test). Needs openssl 1.1.1 or later.
set -eu
cd "$(dirname "$0")"
days=36500
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() {
    key "$tmp/$1.key"
    openssl req -x509 -new -key "$tmp/$1.key" -subj "/CN=$2" -days "$days" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$1.pem"
}
ca ca "tines-bench test CA"
ca other-ca "tines-bench other CA"
cp "$tmp/ca.key" "$tmp/signer.key"
key server.key
openssl req -new -key server.key -subj "/CN=localhost" -out "$tmp/server.csr"
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$tmp/ext"
openssl x509 -req -in "$tmp/server.csr" -CA ca.pem -CAkey "$tmp/signer.key" -CAcreateserial \
    -CAserial "$tmp/serial" -days "$days" -extfile "$tmp/ext" -out server.pem
