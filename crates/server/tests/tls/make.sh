#!/bin/sh
# Remakes the test certificates of crates/server's TLS unit tests (tls/conn.rs): an ECDSA P-256
# root and a leaf for "localhost" it signs, valid for 100 years. Run from this directory:
#   sh make.sh
# Nothing else is needed but openssl; the files are committed so that the tests need no tool.
set -eu
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out root.key
openssl req -x509 -new -key root.key -sha256 -days 36500 -subj "/CN=Tines test root" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out root.pem
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out leaf.key
openssl req -new -key leaf.key -subj "/CN=localhost" -out leaf.csr
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1" > leaf.ext
openssl x509 -req -in leaf.csr -CA root.pem -CAkey root.key -CAcreateserial -sha256 \
    -days 36500 -extfile leaf.ext -out leaf.pem
rm -f leaf.csr leaf.ext root.srl root.key
