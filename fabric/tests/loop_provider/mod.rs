//! "loop": a tiny in-memory provider for testing the safe API. RDM endpoints of one
//! process deliver sends to posted receives (untagged and tagged, peek/claim/discard,
//! multi-receive buffers) through plain `Vec`/`VecDeque` queues under mutexes.
//! It only honours the provider contract as far as the tests need.

use fabric::prov::*;
use fabric::*;
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

pub const NAME: &str = "loop";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Endpoints by address.
fn net() -> &'static Mutex<HashMap<String, Weak<LoopEp>>> {
    static NET: OnceLock<Mutex<HashMap<String, Weak<LoopEp>>>> = OnceLock::new();
    NET.get_or_init(Default::default)
}

/// Completion queues by fid, so tests can inject entries.
fn cqs() -> &'static Mutex<HashMap<u64, Weak<LoopCq>>> {
    static CQS: OnceLock<Mutex<HashMap<u64, Weak<LoopCq>>>> = OnceLock::new();
    CQS.get_or_init(Default::default)
}

/// The provider's completion queue with this fid.
pub fn cq_by_fid(fid: u64) -> Option<Arc<LoopCq>> {
    lock(cqs()).get(&fid).and_then(Weak::upgrade)
}

/// Register the provider once.
pub fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| fabric::register_provider(Arc::new(LoopProv)));
}

pub struct LoopProv;

pub fn loop_info() -> Info {
    let mut i = Info {
        caps: Caps::MSG
            | Caps::TAGGED
            | Caps::SEND
            | Caps::RECV
            | Caps::MULTI_RECV
            | Caps::SOURCE
            | Caps::DIRECTED_RECV,
        addr_format: AddrFormat::Str,
        ..Default::default()
    };
    i.ep_attr.ep_type = EpType::Rdm;
    i.ep_attr.max_msg_size = 1 << 20;
    i.domain_attr.name = "loop0".into();
    i.domain_attr.threading = Threading::Safe;
    i.domain_attr.cq_data_size = 8;
    i.fabric_attr.name = "loop".into();
    i.fabric_attr.prov_name = NAME.into();
    i.fabric_attr.prov_version = 1;
    i.tx_attr.size = 64;
    i.tx_attr.inject_size = 64;
    i.tx_attr.iov_limit = 4;
    i.rx_attr.size = 64;
    i.rx_attr.iov_limit = 4;
    i.tx_attr.caps = i.caps;
    i.rx_attr.caps = i.caps;
    i
}

impl Provider for LoopProv {
    fn name(&self) -> &'static str {
        NAME
    }
    fn version(&self) -> u32 {
        1
    }
    fn params(&self) -> Vec<Param> {
        vec![Param { prov: NAME, name: "depth", kind: ParamType::Size, help: "queue depth", default: "64" }]
    }
    fn getinfo(&self, _hints: &Hints) -> Result<Vec<Info>> {
        Ok(vec![loop_info()])
    }
    fn fabric(&self, _info: &Info) -> Result<Arc<dyn FabricOps>> {
        Ok(Arc::new(LoopFabric { fid: next_fid() }))
    }
}

struct LoopFabric {
    fid: u64,
}

impl FabricOps for LoopFabric {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(Arc::new(LoopDomain { fid: next_fid(), info: info.clone() }))
    }
    fn eq_open(&self, _attr: &EqAttr) -> Result<Arc<dyn EqOps>> {
        Ok(Arc::new(LoopEq { fid: next_fid() }))
    }
    fn passive_ep(&self, _info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        Err(Error::NoSys)
    }
}

struct LoopDomain {
    fid: u64,
    info: Info,
}

impl DomainOps for LoopDomain {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn info(&self) -> &Info {
        &self.info
    }
    fn cq_open(&self, _attr: &CqAttr) -> Result<Arc<dyn CqOps>> {
        let cq = Arc::new(LoopCq {
            fid: next_fid(),
            q: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            signaled: AtomicBool::new(false),
        });
        lock(cqs()).insert(cq.fid, Arc::downgrade(&cq));
        Ok(cq)
    }
    fn cntr_open(&self) -> Result<Arc<dyn CntrOps>> {
        Ok(Arc::new(LoopCntr { fid: next_fid(), ok: AtomicU64::new(0), err: AtomicU64::new(0) }))
    }
    fn av_open(&self, _attr: &AvAttr) -> Result<Arc<dyn AvOps>> {
        Ok(Arc::new(LoopAv { fid: next_fid(), table: Mutex::new(Vec::new()) }))
    }
    fn endpoint(&self, _info: &Info) -> Result<Arc<dyn EndpointOps>> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let addr = format!("loop://{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let ep = Arc::new(LoopEp {
            fid: next_fid(),
            addr: addr.clone(),
            tx_cq: Mutex::new(None),
            rx_cq: Mutex::new(None),
            av: Mutex::new(None),
            cntrs: Mutex::new(Vec::new()),
            st: Mutex::new(RxState { posted: VecDeque::new(), unexpected: VecDeque::new(), min_multi: 0 }),
            enabled: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        lock(net()).insert(addr, Arc::downgrade(&ep));
        Ok(ep)
    }
    unsafe fn mr_reg(&self, _base: *mut u8, _len: usize, _access: MrAccess, key: u64) -> Result<Arc<dyn MrOps>> {
        static NEXT: AtomicU64 = AtomicU64::new(100);
        let key = if key != 0 { key } else { NEXT.fetch_add(1, Ordering::Relaxed) };
        Ok(Arc::new(LoopMr { key, closed: AtomicBool::new(false) }))
    }
}

pub struct LoopMr {
    key: u64,
    closed: AtomicBool,
}

impl MrOps for LoopMr {
    fn key(&self) -> u64 {
        self.key
    }
    fn desc(&self) -> u64 {
        self.key
    }
    fn refresh(&self) -> Result<()> {
        Ok(())
    }
    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::Relaxed) {
            return Err(Error::BadF);
        }
        Ok(())
    }
}

// ---- completion queue ----

pub struct LoopCq {
    fid: u64,
    q: Mutex<VecDeque<std::result::Result<CqEntry, CqErrEntry>>>,
    cv: Condvar,
    signaled: AtomicBool,
}

impl LoopCq {
    pub fn push(&self, e: CqEntry) {
        lock(&self.q).push_back(Ok(e));
        self.cv.notify_all();
    }
    pub fn push_err(&self, e: CqErrEntry) {
        lock(&self.q).push_back(Err(e));
        self.cv.notify_all();
    }
}

fn read_locked(q: &mut VecDeque<std::result::Result<CqEntry, CqErrEntry>>, out: &mut [CqEntry]) -> Result<usize> {
    match q.front() {
        None => return Err(Error::Again),
        Some(Err(_)) => return Err(Error::Avail),
        Some(Ok(_)) => {}
    }
    let mut n = 0;
    while n < out.len() {
        match q.front() {
            Some(Ok(e)) => {
                out[n] = *e;
                q.pop_front();
                n += 1;
            }
            _ => break,
        }
    }
    Ok(n)
}

impl CqOps for LoopCq {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn read(&self, out: &mut [CqEntry]) -> Result<usize> {
        read_locked(&mut lock(&self.q), out)
    }
    fn readerr(&self) -> Result<CqErrEntry> {
        let mut q = lock(&self.q);
        match q.front() {
            Some(Err(e)) => {
                let e = *e;
                q.pop_front();
                Ok(e)
            }
            _ => Err(Error::Again),
        }
    }
    fn sread(&self, out: &mut [CqEntry], timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = lock(&self.q);
        loop {
            match read_locked(&mut q, out) {
                Err(Error::Again) => {}
                r => return r,
            }
            if self.signaled.swap(false, Ordering::Relaxed) {
                return Err(Error::Again);
            }
            q = match deadline {
                None => self.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Again);
                    }
                    self.cv.wait_timeout(q, d - now).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }
    fn wait_fd(&self) -> Result<RawFd> {
        Err(Error::NoSys)
    }
    fn signal(&self) {
        self.signaled.store(true, Ordering::Relaxed);
        self.cv.notify_all();
    }
}

// ---- event queue, counter, address vector ----

struct LoopEq {
    fid: u64,
}

impl EqOps for LoopEq {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn read(&self) -> Result<EqEvent> {
        Err(Error::Again)
    }
    fn peek(&self) -> Result<EqEvent> {
        Err(Error::Again)
    }
    fn readerr(&self) -> Result<EqErrEntry> {
        Err(Error::Again)
    }
    fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent> {
        std::thread::sleep(timeout.unwrap_or(Duration::from_millis(1)));
        Err(Error::Again)
    }
    fn wait_fd(&self) -> Result<RawFd> {
        Err(Error::NoSys)
    }
    fn signal(&self) {}
}

struct LoopCntr {
    fid: u64,
    ok: AtomicU64,
    err: AtomicU64,
}

impl CntrOps for LoopCntr {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn read(&self) -> u64 {
        self.ok.load(Ordering::SeqCst)
    }
    fn readerr(&self) -> u64 {
        self.err.load(Ordering::SeqCst)
    }
    fn add(&self, n: u64) {
        self.ok.fetch_add(n, Ordering::SeqCst);
    }
    fn set(&self, n: u64) {
        self.ok.store(n, Ordering::SeqCst);
    }
    fn adderr(&self, n: u64) {
        self.err.fetch_add(n, Ordering::SeqCst);
    }
    fn seterr(&self, n: u64) {
        self.err.store(n, Ordering::SeqCst);
    }
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let err0 = self.readerr();
        loop {
            if self.read() >= threshold {
                return Ok(());
            }
            if self.readerr() != err0 {
                return Err(Error::Avail);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::TimedOut);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

struct LoopAv {
    fid: u64,
    table: Mutex<Vec<Option<Address>>>,
}

impl LoopAv {
    fn reverse(&self, addr: &str) -> FiAddr {
        lock(&self.table)
            .iter()
            .position(|a| matches!(a, Some(Address::Str(s)) if s == addr))
            .map_or(FiAddr::NOTAVAIL, |i| FiAddr(i as u64))
    }
}

impl AvOps for LoopAv {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn insert(&self, addrs: &[Address]) -> Result<Vec<FiAddr>> {
        if addrs.iter().any(|a| !matches!(a, Address::Str(s) if s.starts_with("loop://"))) {
            return Err(Error::Inval);
        }
        let mut t = lock(&self.table);
        Ok(addrs
            .iter()
            .map(|a| {
                t.push(Some(a.clone()));
                FiAddr(t.len() as u64 - 1)
            })
            .collect())
    }
    fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        let mut t = lock(&self.table);
        for a in addrs {
            match t.get_mut(a.0 as usize) {
                Some(slot @ Some(_)) => *slot = None,
                _ => return Err(Error::Inval),
            }
        }
        Ok(())
    }
    fn lookup(&self, addr: FiAddr) -> Result<Address> {
        lock(&self.table).get(addr.0 as usize).cloned().flatten().ok_or(Error::NoEnt)
    }
}

// ---- endpoint ----

struct Posted {
    iov: Vec<IoVec>,
    ctx: u64,
    user: u64,
    tagged: bool,
    tag: u64,
    ignore: u64,
    src: FiAddr,
    /// Bytes used, for a multi-receive buffer.
    multi: Option<usize>,
}

struct Msg {
    data: Vec<u8>,
    tagged: bool,
    tag: u64,
    cq_data: Option<u64>,
    src: String,
    claimed_by: Option<u64>,
}

struct RxState {
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Msg>,
    min_multi: usize,
}

pub struct LoopEp {
    fid: u64,
    addr: String,
    tx_cq: Mutex<Option<Arc<dyn CqOps>>>,
    rx_cq: Mutex<Option<Arc<dyn CqOps>>>,
    av: Mutex<Option<Arc<dyn AvOps>>>,
    cntrs: Mutex<Vec<(Arc<dyn CntrOps>, BindFlags)>>,
    st: Mutex<RxState>,
    enabled: AtomicBool,
    closed: AtomicBool,
}

fn loop_cq(cq: &Mutex<Option<Arc<dyn CqOps>>>) -> Option<Arc<dyn CqOps>> {
    lock(cq).clone()
}

fn as_loop(cq: &Arc<dyn CqOps>) -> &LoopCq {
    cq.as_any().downcast_ref::<LoopCq>().expect("a loop cq")
}

/// Copy `data` into the pieces; bytes copied.
///
/// # Safety
/// The pieces must be valid for writes.
unsafe fn scatter(iov: &[IoVec], data: &[u8]) -> usize {
    let mut done = 0;
    for v in iov {
        let n = v.len.min(data.len() - done);
        // SAFETY: the caller guarantees `v` is writable for `v.len >= n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(data[done..].as_ptr(), v.base, n) };
        done += n;
    }
    done
}

impl LoopEp {
    fn src_of(&self, sender: &str) -> FiAddr {
        match lock(&self.av).as_ref() {
            Some(av) => av.as_any().downcast_ref::<LoopAv>().map_or(FiAddr::NOTAVAIL, |a| a.reverse(sender)),
            None => FiAddr::NOTAVAIL,
        }
    }

    fn count(&self, dir: BindFlags, ok: bool) {
        for (c, f) in lock(&self.cntrs).iter() {
            if f.contains(dir) {
                if ok {
                    c.add(1)
                } else {
                    c.adderr(1)
                }
            }
        }
    }

    fn rx_complete(&self, r: std::result::Result<CqEntry, CqErrEntry>) {
        self.count(BindFlags::RECV, r.is_ok());
        if let Some(cq) = loop_cq(&self.rx_cq) {
            match r {
                Ok(e) => as_loop(&cq).push(e),
                Err(e) => as_loop(&cq).push_err(e),
            }
        }
    }

    fn matches(&self, p: &Posted, m: &Msg) -> bool {
        p.tagged == m.tagged
            && (!p.tagged || (p.tag ^ m.tag) & !p.ignore == 0)
            && (p.src.is_unspec() || p.src == self.src_of(&m.src))
    }

    fn entry_for(&self, p: &Posted, m: &Msg) -> CqEntry {
        let mut flags = Caps::RECV | if m.tagged { Caps::TAGGED } else { Caps::MSG };
        if m.cq_data.is_some() {
            flags |= Caps::REMOTE_CQ_DATA;
        }
        CqEntry {
            op_context: p.ctx,
            flags,
            len: m.data.len(),
            buf: 0,
            data: m.cq_data.unwrap_or(0),
            tag: m.tag,
            src: self.src_of(&m.src),
        }
    }

    /// Place a message into a posted receive. Returns (message consumed, receive
    /// finished).
    fn place(&self, p: &mut Posted, m: &Msg, min_multi: usize) -> (bool, bool) {
        let mut e = self.entry_for(p, m);
        match p.multi {
            None => {
                let cap = IoVec::total(&p.iov);
                // SAFETY: the posted pieces are writable until this receive's
                // completion, written just below.
                let n = unsafe { scatter(&p.iov, &m.data) };
                if m.data.len() > cap {
                    e.len = n;
                    let olen = m.data.len() - cap;
                    self.rx_complete(Err(CqErrEntry { entry: e, olen, err: Error::Trunc, prov_errno: 0 }));
                } else {
                    self.rx_complete(Ok(e));
                }
                (true, true)
            }
            Some(used) => {
                let cap = p.iov[0].len;
                if m.data.len() > cap - used {
                    // Does not fit: release the buffer, the message goes elsewhere.
                    let mut r = CqEntry::new(p.ctx, Caps::RECV | Caps::MULTI_RECV);
                    r.flags |= if p.tagged { Caps::TAGGED } else { Caps::MSG };
                    self.rx_complete(Ok(r));
                    return (false, true);
                }
                // SAFETY: `used..used+len` is inside the posted buffer and not yet
                // reported to the application.
                let at = unsafe { p.iov[0].base.add(used) };
                // SAFETY: as above; the piece is writable.
                unsafe { scatter(&[IoVec { base: at, len: m.data.len() }], &m.data) };
                let used = used + m.data.len();
                p.multi = Some(used);
                e.buf = at as usize;
                let finished = cap - used < min_multi.max(1);
                if finished {
                    e.flags |= Caps::MULTI_RECV;
                }
                self.rx_complete(Ok(e));
                (true, finished)
            }
        }
    }

    /// A message arrives.
    fn deliver(&self, m: Msg) {
        let mut st = lock(&self.st);
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let min = st.min_multi;
        let mut i = 0;
        while i < st.posted.len() {
            if self.matches(&st.posted[i], &m) {
                let (consumed, finished) = {
                    let p = &mut st.posted[i];
                    self.place(p, &m, min)
                };
                if finished {
                    st.posted.remove(i);
                } else {
                    i += 1;
                }
                if consumed {
                    return;
                }
            } else {
                i += 1;
            }
        }
        st.unexpected.push_back(m);
    }

    fn send_common(&self, data: Vec<u8>, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if self.closed.load(Ordering::Relaxed) || !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::OpBadState);
        }
        let av = lock(&self.av).clone().ok_or(Error::NoAv)?;
        let dest = match av.lookup(op.addr)? {
            Address::Str(s) => s,
            _ => return Err(Error::Inval),
        };
        let peer = lock(net()).get(&dest).and_then(Weak::upgrade).ok_or(Error::HostUnreach)?;
        let tagged = flags.contains(OpFlags::TAGGED);
        let cq_data = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(op.data);
        peer.deliver(Msg { data, tagged, tag: op.tag, cq_data, src: self.addr.clone(), claimed_by: None });
        Ok(())
    }
}

impl EndpointOps for LoopEp {
    fn fid(&self) -> u64 {
        self.fid
    }
    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        if cq.as_any().downcast_ref::<LoopCq>().is_none() {
            return Err(Error::Inval);
        }
        if flags.contains(BindFlags::TRANSMIT) {
            *lock(&self.tx_cq) = Some(cq.clone());
        }
        if flags.contains(BindFlags::RECV) {
            *lock(&self.rx_cq) = Some(cq.clone());
        }
        Ok(())
    }
    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        lock(&self.cntrs).push((cntr.clone(), flags));
        Ok(())
    }
    fn bind_eq(&self, _eq: &Arc<dyn EqOps>) -> Result<()> {
        Ok(())
    }
    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()> {
        *lock(&self.av) = Some(av.clone());
        Ok(())
    }
    fn enable(&self) -> Result<()> {
        self.enabled.store(true, Ordering::Relaxed);
        Ok(())
    }
    fn getname(&self) -> Result<Address> {
        Ok(Address::Str(self.addr.clone()))
    }
    fn setname(&self, _addr: &Address) -> Result<()> {
        Err(Error::NoSys)
    }
    fn getpeer(&self) -> Result<Address> {
        Err(Error::NotConn)
    }
    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let tx = loop_cq(&self.tx_cq).ok_or(Error::NoCq)?;
        let mut data = Vec::with_capacity(IoVec::total(op.iov));
        for v in op.iov {
            // SAFETY: the caller guarantees each piece is readable for its length.
            data.extend_from_slice(unsafe { std::slice::from_raw_parts(v.base, v.len) });
        }
        let len = data.len();
        self.send_common(data, op, flags)?;
        let kind = if flags.contains(OpFlags::TAGGED) { Caps::TAGGED } else { Caps::MSG };
        let mut e = CqEntry::new(op.context, Caps::SEND | kind);
        e.len = len;
        self.count(BindFlags::TRANSMIT, true);
        as_loop(&tx).push(e);
        Ok(())
    }
    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if self.closed.load(Ordering::Relaxed) || !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::OpBadState);
        }
        loop_cq(&self.rx_cq).ok_or(Error::NoCq)?;
        let tagged = flags.contains(OpFlags::TAGGED);
        let multi = flags.contains(OpFlags::MULTI_RECV);
        if multi && op.iov.len() != 1 {
            return Err(Error::Inval);
        }
        let mut p = Posted {
            iov: op.iov.to_vec(),
            ctx: op.context,
            user: op.user_context,
            tagged,
            tag: op.tag,
            ignore: op.ignore,
            src: op.addr,
            multi: multi.then_some(0),
        };
        let mut st = lock(&self.st);
        let min = st.min_multi;
        if flags.contains(OpFlags::PEEK) {
            let found = st.unexpected.iter().position(|m| m.claimed_by.is_none() && self.matches(&p, m));
            match found {
                None => {
                    let mut e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
                    e.tag = op.tag;
                    self.rx_complete(Err(CqErrEntry { entry: e, olen: 0, err: Error::NoMsg, prov_errno: 0 }));
                }
                Some(i) => {
                    let e = self.entry_for(&p, &st.unexpected[i]);
                    if flags.contains(OpFlags::DISCARD) {
                        st.unexpected.remove(i);
                    } else if flags.contains(OpFlags::CLAIM) {
                        st.unexpected[i].claimed_by = Some(op.user_context);
                    }
                    self.rx_complete(Ok(e));
                }
            }
            return Ok(());
        }
        if flags.contains(OpFlags::CLAIM) {
            let i = st.unexpected.iter().position(|m| m.claimed_by == Some(op.user_context)).ok_or(Error::NoMsg)?;
            let m = st.unexpected.remove(i).expect("position is in range");
            if flags.contains(OpFlags::DISCARD) {
                let mut e = self.entry_for(&p, &m);
                e.len = 0;
                self.rx_complete(Ok(e));
            } else {
                self.place(&mut p, &m, min);
            }
            return Ok(());
        }
        let mut i = 0;
        while i < st.unexpected.len() {
            if st.unexpected[i].claimed_by.is_none() && self.matches(&p, &st.unexpected[i]) {
                let (consumed, finished) = self.place(&mut p, &st.unexpected[i], min);
                if consumed {
                    st.unexpected.remove(i);
                } else {
                    i += 1;
                }
                if finished {
                    return Ok(());
                }
            } else {
                i += 1;
            }
        }
        st.posted.push_back(p);
        Ok(())
    }
    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > 64 {
            return Err(Error::MsgSize);
        }
        self.send_common(data.to_vec(), op, flags)
    }
    fn cancel(&self, user_context: u64) -> Result<()> {
        let mut st = lock(&self.st);
        let mut i = 0;
        while i < st.posted.len() {
            if st.posted[i].user == user_context {
                let p = st.posted.remove(i).expect("in range");
                self.flush(&p);
            } else {
                i += 1;
            }
        }
        Ok(())
    }
    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        lock(&self.st).min_multi = bytes;
        Ok(())
    }
    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        lock(net()).remove(&self.addr);
        let mut st = lock(&self.st);
        while let Some(p) = st.posted.pop_front() {
            self.flush(&p);
        }
        Ok(())
    }
}

impl LoopEp {
    fn flush(&self, p: &Posted) {
        let mut flags = Caps::RECV | if p.tagged { Caps::TAGGED } else { Caps::MSG };
        if p.multi.is_some() {
            flags |= Caps::MULTI_RECV;
        }
        let e = CqEntry::new(p.ctx, flags);
        self.rx_complete(Err(CqErrEntry { entry: e, olen: 0, err: Error::Canceled, prov_errno: 0 }));
    }
}
