//! Peers: one per socket address, created when first sent to or heard from,
//! found by address or by AV handle.

use super::{Inner, Peer, PeerId, UdpRdmEp, PEERS_MAX};
use fabric_core::{Address, Error, FiAddr, Result};
use fabric_util::bind::Bindings;
use fabric_util::rdm::PeerRx;
use fabric_util::reliable::Channel;
use fabric_util::reliable::Nanos;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// The peer `id` in `peers`, if it is still there.
pub(super) fn slot(peers: &mut [Option<Peer>], id: PeerId) -> Option<&mut Peer> {
    peers.get_mut(id.idx as usize)?.as_mut().filter(|p| p.gen == id.gen)
}

impl UdpRdmEp {
    pub(super) fn peer(g: &mut Inner, id: PeerId) -> Option<&mut Peer> {
        slot(&mut g.peers, id)
    }

    /// The peer at `addr`, created if new (`None` when over the peer limit).
    #[inline]
    pub(super) fn peer_by_sock(&self, g: &mut Inner, addr: SocketAddr, now: Nanos) -> Option<PeerId> {
        // The last peer first: datagrams come in runs from one peer.
        if let Some((a, id)) = g.last_sock {
            if a == addr && Self::peer(g, id).is_some() {
                return Some(id);
            }
        }
        self.peer_by_sock_slow(g, addr, now)
    }

    /// [`UdpRdmEp::peer_by_sock`] past the last peer: the map, or a peer created.
    #[inline(never)]
    fn peer_by_sock_slow(&self, g: &mut Inner, addr: SocketAddr, now: Nanos) -> Option<PeerId> {
        if let Some(&id) = g.by_sock.get(&addr) {
            g.last_sock = Some((addr, id));
            return Some(id);
        }
        if g.by_sock.len() >= PEERS_MAX {
            return None;
        }
        let idx = match g.peers.iter().position(|p| p.is_none()) {
            Some(i) => i,
            None => {
                g.peers.push(None);
                g.peers.len() - 1
            }
        };
        static GEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let gen = GEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        g.peers[idx] = Some(Peer {
            addr,
            sa: socket2::SockAddr::from(addr),
            uri: Address::from(addr),
            chan: Channel::new(self.cfg.clone(), self.epoch, now),
            frames: VecDeque::new(),
            next_fid: 0,
            pr: PeerRx::holding(),
            broken: None,
            fi_addr: FiAddr::NOTAVAIL,
            av_version: u64::MAX,
            gen,
        });
        let id = PeerId { idx: idx as u32, gen };
        g.by_sock.insert(addr, id);
        Some(id)
    }

    /// The peer behind an AV handle, to post to: `FI_EHOSTUNREACH` when its
    /// channel has failed (and the peer is not yet forgotten).
    pub(super) fn peer_for(&self, g: &mut Inner, dest: FiAddr, now: Nanos) -> Result<PeerId> {
        let v = g.b.av.as_ref().ok_or(Error::NoAv)?.version();
        if g.cache_version != v {
            g.by_addr.clear();
            g.last_addr = None;
            g.cache_version = v;
        }
        // The last peer posted to, the common case.
        if let Some((a, id)) = g.last_addr {
            if a == dest {
                if let Some(p) = Self::peer(g, id) {
                    return if p.chan.is_failed() { Err(Error::HostUnreach) } else { Ok(id) };
                }
            }
        }
        let last = g.last_addr.filter(|&(a, _)| a == dest).map(|(_, id)| id);
        let id = match last.or_else(|| g.by_addr.get(&dest).copied()) {
            Some(id) if Self::peer(g, id).is_some() => id,
            _ => {
                let av = g.b.av.clone().ok_or(Error::NoAv)?;
                let addr = av.get(dest).and_then(|a| a.sockaddr()).ok_or(Error::Inval)?;
                let id = self.peer_by_sock(g, addr, now).ok_or(Error::Again)?;
                g.by_addr.insert(dest, id);
                id
            }
        };
        g.last_addr = Some((dest, id));
        if Self::peer(g, id).is_some_and(|p| p.chan.is_failed()) {
            return Err(Error::HostUnreach);
        }
        Ok(id)
    }

    /// The AV handle of peer `p` in the AV bound in `b` (`FI_ADDR_NOTAVAIL`
    /// when not in it).
    pub(super) fn src_in(b: &Bindings, p: &mut Peer) -> FiAddr {
        let Some(av) = b.av.as_ref() else { return FiAddr::NOTAVAIL };
        let v = av.version();
        if p.av_version != v {
            p.fi_addr = av.find(&p.uri).unwrap_or(FiAddr::NOTAVAIL);
            p.av_version = v;
        }
        p.fi_addr
    }
}
