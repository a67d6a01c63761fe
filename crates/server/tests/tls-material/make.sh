#!/usr/bin/env bash
# Remakes the test certificates and keys of crates/server/src/tls (ADR 0032) with openssl:
# a root and an intermediate, server leaves of every key type Tines reads (valid for a
# century, so the committed files do not expire under the tests), every key format, and a
# client CA with a good, a revoked and a stranger's client certificate plus its CRL.
# Run from anywhere: bash crates/server/tests/tls-material/make.sh
set -euo pipefail
cd "$(dirname "$0")"
rm -rf ./*.pem ./*.key ./*.txt ca
DAYS=36500
PASS=secret

ca_ext=$'basicConstraints=critical,CA:true\nkeyUsage=critical,keyCertSign,cRLSign'

# name, key, subject, issuer cert, issuer key, serial, extensions: a certificate signed by issuer.
sign() {
    openssl req -new -key "$2" -subj "$3" |
        openssl x509 -req -CA "$4" -CAkey "$5" -set_serial "$6" -days $DAYS -extfile <(printf '%s\n' "$7") -out "$1" 2>/dev/null
}

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out root.key
openssl req -x509 -new -key root.key -subj "/CN=Tines Test Root" -days $DAYS -out root.pem \
    -addext "basicConstraints=critical,CA:true" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out inter.key
sign inter.pem inter.key "/CN=Tines Test Intermediate" root.pem root.key 0x10 "$ca_ext"

# Server keys: PKCS#8 as genpkey writes them, then the other formats.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec256.key
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out ec384.key
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-521 -out ec521.key
openssl genpkey -algorithm ED25519 -out ed25519.key
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa2048.key 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out rsa1024.key 2>/dev/null
openssl ec -in ec256.key -out ec256.sec1.key 2>/dev/null
openssl ec -in ec384.key -out ec384.sec1.key 2>/dev/null
openssl rsa -in rsa2048.key -traditional -out rsa2048.pkcs1.key 2>/dev/null
openssl pkcs8 -topk8 -v2 aes-256-cbc -in ec256.key -passout pass:$PASS -out ec256.enc.key
openssl pkcs8 -topk8 -v2 aes-256-cbc -in rsa2048.key -passout pass:$PASS -out rsa2048.enc.key
openssl ec -in ec256.key -aes256 -passout pass:$PASS -out ec256.legacy.key 2>/dev/null
printf '%s\n' "$PASS" > password.txt

leaf_ext() { printf 'subjectAltName=%s\nbasicConstraints=CA:false\nextendedKeyUsage=serverAuth' "$1"; }
# name, key, SAN, serial: a leaf, and its chain (leaf, intermediate).
leaf() {
    sign "$1.leaf.pem" "$2" "/CN=$1" inter.pem inter.key "$4" "$(leaf_ext "$3")"
    cat "$1.leaf.pem" inter.pem > "$1.pem"
    rm "$1.leaf.pem"
}
leaf ec256 ec256.key "DNS:localhost,DNS:a.test,IP:127.0.0.1" 0x0100
leaf ec384 ec384.key "DNS:*.b.test" 0x0101
leaf ec521 ec521.key "DNS:p521.test" 0x0102
leaf ed25519 ed25519.key "DNS:ed.test" 0x0103
leaf rsa2048 rsa2048.key "DNS:rsa.test" 0x0104
leaf rsa1024 rsa1024.key "DNS:small.test" 0x0105
leaf dup ed25519.key "DNS:a.test" 0x0106
leaf nonames ed25519.key "IP:127.0.0.2" 0x0107
# The chain upside down (intermediate first) and one key with its certificate in one file.
awk '/BEGIN/{n++} n==1' ec256.pem > ec256-only-leaf.tmp
cat inter.pem ec256-only-leaf.tmp > upside-down.pem
cat ec256.pem ec256.sec1.key > ec256-with-key.pem
rm ec256-only-leaf.tmp

# Client certificates: their CA, alice (good), mallory (revoked), a stranger's.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out client-ca.key
openssl req -x509 -new -key client-ca.key -subj "/O=Tines Test/CN=Client CA" -days $DAYS -out client-ca.pem \
    -addext "basicConstraints=critical,CA:true" -addext "keyUsage=critical,keyCertSign,cRLSign"
client_ext=$'basicConstraints=CA:false\nextendedKeyUsage=clientAuth'
for who in alice mallory; do
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $who.key
done
sign alice.pem alice.key "/C=FR/O=Example, Inc./CN=alice" client-ca.pem client-ca.key 0x0ABCDEF0 "$client_ext"
sign mallory.pem mallory.key "/O=Example/CN=mallory" client-ca.pem client-ca.key 0x0BAD "$client_ext"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out stranger-ca.key
openssl req -x509 -new -key stranger-ca.key -subj "/CN=Stranger CA" -days $DAYS -out stranger-ca.pem \
    -addext "basicConstraints=critical,CA:true" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out stranger.key
sign stranger.pem stranger.key "/CN=stranger" stranger-ca.pem stranger-ca.key 0x77 "$client_ext"
mkdir ca
: > ca/index.txt
echo 1000 > ca/crlnumber
cat > ca/ca.cnf <<CNF
[ca]
default_ca = d
[d]
database = ca/index.txt
crlnumber = ca/crlnumber
default_md = sha256
default_crl_days = $DAYS
CNF
openssl ca -config ca/ca.cnf -keyfile client-ca.key -cert client-ca.pem -revoke mallory.pem 2>/dev/null
openssl ca -config ca/ca.cnf -keyfile client-ca.key -cert client-ca.pem -gencrl -out client-ca.crl.pem 2>/dev/null
rm -rf ca root.key inter.key client-ca.key stranger-ca.key
