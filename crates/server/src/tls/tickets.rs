//! Session tickets every worker can open (ADR 0033). rustls' own ticketer makes random keys
//! per process, so a ticket from one worker fails on the next; [`EpochTicketer`] derives the key of
//! each epoch (`unix_time / tls_ticket_rotation`) from the master's 32-byte secret with
//! HKDF-SHA256, so every process holding the secret (workers forked from the master, those of
//! a new master after USR2, which carries the secret) has the same keys, with no IPC.
//!
//! The keys also depend on a digest of the settings that judged the session's client
//! certificate (`client_cert`, `client_ca`, `client_crl`): rustls resumes a session with the
//! client chain its ticket carries, without asking the verifier again, so a ticket made under
//! other client-certificate settings (before a HUP that made them `required`, or added a CRL)
//! must not open: its client makes a full handshake, judged by the settings of now.
//!
//! A ticket is `epoch (8 bytes, big-endian) | nonce (12) | AES-256-GCM(state) | tag (16)`,
//! the epoch as associated data. It opens in its epoch and the next: a ticket lives between
//! one and two epochs, and `lifetime` promises one.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hkdf::{Salt, HKDF_SHA256};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

const SALT: &[u8] = b"tines session ticket keys v1";
const EPOCH_LEN: usize = 8;
/// TLS 1.3's ceiling on a ticket's lifetime (RFC 8446, 4.6.1).
const MAX_LIFETIME: u64 = 7 * 24 * 3600;

/// The ticketer of a server config: keys derived per epoch from the master's secret.
pub struct EpochTicketer {
    prk: ring::hkdf::Prk,
    /// The digest of the client-certificate settings, in every key's derivation.
    context: [u8; 32],
    rotation: u64,
    /// The keys of the last two epochs asked for (derived on first use).
    keys: Mutex<[Option<(u64, LessSafeKey)>; 2]>,
    random: SystemRandom,
}

impl std::fmt::Debug for EpochTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochTicketer")
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

impl EpochTicketer {
    /// The ticketer of `secret`, a key per `rotation` seconds (at least 1), for sessions
    /// whose client certificates the settings digested in `context` judged.
    pub fn new(secret: &[u8; 32], rotation: u64, context: [u8; 32]) -> EpochTicketer {
        EpochTicketer {
            prk: Salt::new(HKDF_SHA256, SALT).extract(secret),
            context,
            rotation: rotation.max(1),
            keys: Mutex::new([None, None]),
            random: SystemRandom::new(),
        }
    }

    fn epoch_at(&self, unix_seconds: u64) -> u64 {
        unix_seconds / self.rotation
    }

    /// Runs `f` with the key of `epoch`.
    fn with_key<R>(&self, epoch: u64, f: impl FnOnce(&LessSafeKey) -> R) -> R {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = match keys
            .iter()
            .position(|k| matches!(k, Some((e, _)) if *e == epoch))
        {
            Some(slot) => slot,
            None => {
                // Replace the older (or an empty) slot.
                let slot = match (&keys[0], &keys[1]) {
                    (None, _) => 0,
                    (_, None) => 1,
                    (Some((a, _)), Some((b, _))) => usize::from(b < a),
                };
                let epoch_bytes = epoch.to_be_bytes();
                let info = [&epoch_bytes[..], &self.context[..]];
                let okm = self
                    .prk
                    .expand(&info, &AES_256_GCM)
                    .expect("AES-256 key length");
                keys[slot] = Some((epoch, LessSafeKey::new(UnboundKey::from(okm))));
                slot
            }
        };
        let (_, key) = keys[slot].as_ref().expect("the slot was just filled");
        f(key)
    }

    /// A ticket of `plain` made at `now` (unix seconds).
    pub(crate) fn encrypt_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        let epoch = self.epoch_at(now).to_be_bytes();
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(EPOCH_LEN + NONCE_LEN + plain.len() + 16);
        ticket.extend_from_slice(&epoch);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(plain);
        let mut body = ticket.split_off(EPOCH_LEN + NONCE_LEN);
        self.with_key(self.epoch_at(now), |key| {
            key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(epoch),
                &mut body,
            )
        })
        .ok()?;
        ticket.append(&mut body);
        Some(ticket)
    }

    /// The state in `ticket`, if it was made by this secret in the epoch of `now` or the one
    /// before.
    pub(crate) fn decrypt_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if ticket.len() < EPOCH_LEN + NONCE_LEN + AES_256_GCM.tag_len() {
            return None;
        }
        let (epoch_bytes, rest) = ticket.split_at(EPOCH_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let epoch = u64::from_be_bytes(epoch_bytes.try_into().ok()?);
        let current = self.epoch_at(now);
        if epoch != current && epoch.checked_add(1) != Some(current) {
            return None;
        }
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = sealed.to_vec();
        let plain_len = self
            .with_key(epoch, |key| {
                key.open_in_place(nonce, Aad::from(epoch_bytes), &mut body)
                    .map(|p| p.len())
            })
            .ok()?;
        body.truncate(plain_len);
        Some(body)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl ProducesTickets for EpochTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.rotation.min(MAX_LIFETIME) as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, unix_now())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(cipher, unix_now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3600;

    #[test]
    fn a_ticket_opens_in_its_epoch_and_the_next_only() {
        let ticketer = EpochTicketer::new(&[1; 32], HOUR, [0; 32]);
        let start = 500_000 * HOUR;
        let ticket = ticketer
            .encrypt_at(b"state", start + HOUR - 1)
            .expect("sealed");
        assert_eq!(
            ticketer.decrypt_at(&ticket, start).as_deref(),
            Some(&b"state"[..])
        );
        assert_eq!(
            ticketer.decrypt_at(&ticket, start + HOUR).as_deref(),
            Some(&b"state"[..])
        );
        assert_eq!(ticketer.decrypt_at(&ticket, start + 2 * HOUR), None);
        assert_eq!(ticketer.decrypt_at(&ticket, start - 1), None);
        assert_eq!(ticketer.lifetime(), 3600);
    }

    #[test]
    fn every_ticketer_of_one_secret_opens_the_others_tickets() {
        let now = 1_800_000_000;
        let worker_a = EpochTicketer::new(&[9; 32], HOUR, [0; 32]);
        let worker_b = EpochTicketer::new(&[9; 32], HOUR, [0; 32]);
        let stranger = EpochTicketer::new(&[8; 32], HOUR, [0; 32]);
        let ticket = worker_a.encrypt_at(b"resume me", now).expect("sealed");
        assert_eq!(
            worker_b.decrypt_at(&ticket, now + HOUR).as_deref(),
            Some(&b"resume me"[..])
        );
        assert_eq!(stranger.decrypt_at(&ticket, now), None);
        // The same secret under other client-certificate settings (a HUP that made them
        // required, or added a CRL): the ticket does not open, its client handshakes in full.
        let stricter = EpochTicketer::new(&[9; 32], HOUR, [1; 32]);
        assert_eq!(stricter.decrypt_at(&ticket, now), None);
        let again = worker_a.encrypt_at(b"resume me", now).expect("sealed");
        assert_ne!(ticket, again, "a fresh nonce per ticket");
    }

    #[test]
    fn a_changed_or_short_ticket_does_not_open() {
        let now = 1_800_000_000;
        let ticketer = EpochTicketer::new(&[3; 32], HOUR, [0; 32]);
        let ticket = ticketer.encrypt_at(b"state", now).expect("sealed");
        for i in [0, 7, 8, 19, 20, ticket.len() - 1] {
            let mut changed = ticket.clone();
            changed[i] ^= 1;
            assert_eq!(ticketer.decrypt_at(&changed, now), None, "byte {i}");
        }
        assert_eq!(ticketer.decrypt_at(&ticket[..30], now), None);
        assert_eq!(ticketer.decrypt_at(b"", now), None);
    }
}
