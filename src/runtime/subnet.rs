//! Where an attempt's internal network and its egress proxy sit (issue 25), decided before
//! either exists: a /28 of [`POOL`] per attempt, the proxy at a fixed address in it. So the
//! agent's container can be given its proxy (`HTTPS_PROXY`, the gateway's base URL) before
//! the proxy has started, and be started beside it instead of after it.
//!
//! Pure. The runtime creates the network with [`Slot::subnet`] (engines refuse a subnet
//! that overlaps one of their networks: "Pool overlaps ...", [`is_overlap`]; the next slot
//! is tried, at most [`TRIES`]). The engine's own allocation (the agent's address) is held
//! to [`Slot::ip_range`], the lower half, so it never takes the proxy's [`Slot::proxy`].
//!
//! The network is `--internal` with `inhibit_ipv4` (the host has no address on it, so no
//! host route is added for the subnet): a subnet that overlaps the host's own networks
//! changes nothing on the host, and only the engine's networks can collide with it.

use std::net::Ipv4Addr;

/// The private pool attempts' networks are cut from: 10.213.0.0/16, 4096 slots of /28.
pub const POOL: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 0);
pub const POOL_PREFIX: u8 = 16;
/// Each attempt's network: 16 addresses (network, gateway, the agent's, the proxy's, ...).
pub const SLOT_PREFIX: u8 = 28;
/// Slots tried before the network's create gives up.
pub const TRIES: u32 = 64;

/// The number of slots in [`POOL`].
pub const SLOTS: u32 = 1 << (SLOT_PREFIX - POOL_PREFIX);

/// One attempt's addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The network's subnet, e.g. `10.213.4.16/28`.
    pub subnet: String,
    /// The range the engine allocates from (the lower /29: the gateway and the agent).
    pub ip_range: String,
    /// The proxy's address: the subnet's last usable one.
    pub proxy: Ipv4Addr,
}

/// Slot `index` (taken modulo [`SLOTS`]).
pub fn slot(index: u32) -> Slot {
    let size = 1u32 << (32 - SLOT_PREFIX);
    let base = u32::from(POOL) + (index % SLOTS) * size;
    Slot {
        subnet: format!("{}/{SLOT_PREFIX}", Ipv4Addr::from(base)),
        ip_range: format!("{}/{}", Ipv4Addr::from(base), SLOT_PREFIX + 1),
        proxy: Ipv4Addr::from(base + size - 2),
    }
}

/// The slot an attempt's network tries first: a hash of its name (which names the home,
/// task and attempt), so attempts running at once seldom try the same one.
pub fn first_slot(network: &str) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(network.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % SLOTS
}

/// Whether an engine's refusal of a network's create says its subnet is taken.
pub fn is_overlap(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("pool overlaps") || m.contains("overlaps with other one")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_tile_the_pool_and_the_proxy_is_outside_the_engines_range() {
        assert_eq!(SLOTS, 4096);
        let first = slot(0);
        assert_eq!(first.subnet, "10.213.0.0/28");
        assert_eq!(first.ip_range, "10.213.0.0/29");
        assert_eq!(first.proxy, Ipv4Addr::new(10, 213, 0, 14));
        let s = slot(17);
        assert_eq!(s.subnet, "10.213.1.16/28");
        assert_eq!(s.ip_range, "10.213.1.16/29");
        assert_eq!(s.proxy, Ipv4Addr::new(10, 213, 1, 30));
        assert_eq!(slot(SLOTS - 1).proxy, Ipv4Addr::new(10, 213, 255, 254));
        assert_eq!(slot(SLOTS), first);
        assert!(first_slot("polyphony-x-1-abcd-net") < SLOTS);
        assert_eq!(
            first_slot("polyphony-x-1-abcd-net"),
            first_slot("polyphony-x-1-abcd-net")
        );
        assert!(is_overlap(
            "Docker responded with status code 403: Pool overlaps with other one on this address space"
        ));
        assert!(!is_overlap("network with name x already exists"));
    }
}
