//! Running out of descriptors (issue 15, part 2; libfabric issue 5296): an RDM
//! endpoint in a child process whose `RLIMIT_NOFILE` leaves room for only a few
//! sockets sends to more peers than it can connect to, and then all of those
//! peers send to it.
//!
//! - Its sends to the peers it cannot reach complete with `FI_EMFILE` error
//!   completions (no hang, no error from the post); those to the others arrive.
//! - It keeps serving the peers it has: their answers arrive.
//! - The peers it cannot take in are refused at once (their sends complete with
//!   errors instead of waiting in its backlog), and its listener is not polled in
//!   a loop: `accept` is called a bounded number of times however long it waits.
//! - It says so in one warning, not one per failure.

mod common;

#[path = "../../../fabric/tests/children/mod.rs"]
mod children;

use children::{say, Commands, Proc};
use fabric_core::prov::{IoVec, Op};
use fabric_core::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const ROLE: &str = "TCP_EMFILE_CHILD";
/// Peers, more than the child has descriptors for.
const PEERS: usize = 12;
/// Descriptors the child has room for beyond those open when it starts sending.
const ROOM: u64 = 3;
const WATCHDOG: Duration = Duration::from_secs(60);

fn op(iov: &[IoVec], addr: FiAddr, ctx: u64) -> Op<'_> {
    Op { iov, addr, context: ctx, user_context: ctx, data: 0, tag: 0, ignore: 0 }
}

fn rdm_info() -> Info {
    let p = fabric_tcp::provider();
    p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap().remove(0)
}

/// The process's CPU time in clock ticks (user plus system), from /proc/self/stat.
fn cpu_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(") ").map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime), counted from the state (field 3).
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0)
}

// ----- the child: the starved endpoint -----

fn child() {
    let cmds = Commands::start();
    let deadline = Instant::now() + WATCHDOG;
    let info = rdm_info();
    let p = fabric_tcp::provider();
    let fab = p.fabric(&info).unwrap();
    let dom = fab.domain(&info).unwrap();
    let me = common::rdm_endpoint(&dom, &info);
    say("READY", &me.ep.getname().unwrap().sockaddr().unwrap().to_string());
    let line = cmds.next(deadline);
    let peers: Vec<FiAddr> = line
        .split_whitespace()
        .map(|a| me.av.insert(&[Address::Sockaddr(a.parse::<SocketAddr>().unwrap())]).unwrap()[0])
        .collect();
    assert_eq!(peers.len(), PEERS);
    // Receives for the answers (the buffers live until the process exits).
    let bufs: &'static mut [[u8; 16]] = Box::leak(vec![[0u8; 16]; PEERS].into_boxed_slice());
    for (i, b) in bufs.iter_mut().enumerate() {
        let ri = [IoVec { base: b.as_mut_ptr(), len: 16 }];
        // SAFETY: the buffer is leaked: it outlives the operation.
        unsafe { me.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 1000 + i as u64), OpFlags::empty()).unwrap() };
    }

    // Room for ROOM more descriptors, counting from the highest one open.
    let top = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap();
    // Fill the holes below it (inherited descriptors may leave some), so that
    // exactly ROOM are left.
    let mut fillers = Vec::new();
    loop {
        let f = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f) as u64;
        if fd > top {
            break;
        }
        fillers.push(f);
    }
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the rlimit we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = top + 1 + ROOM;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }

    let msgs: &'static mut [[u8; 8]] = Box::leak(vec![[0u8; 8]; PEERS].into_boxed_slice());
    let mut sync_errors = Vec::new();
    for (i, m) in msgs.iter_mut().enumerate() {
        m[..].copy_from_slice(format!("hi {i:05}").as_bytes());
        let si = [IoVec { base: m.as_mut_ptr(), len: 8 }];
        // SAFETY: the buffer is leaked: it outlives the operation.
        if let Err(e) = unsafe { me.ep.post_send(&op(&si, peers[i], i as u64), OpFlags::empty()) } {
            sync_errors.push(format!("{i}:{e}"));
        }
    }
    assert!(sync_errors.is_empty(), "posts failed instead of completing with errors: {sync_errors:?}");
    let (mut ok, mut err) = (Vec::new(), Vec::new());
    let mut out = [CqEntry::new(0, Caps::empty())];
    let mut answers = Vec::new();
    while ok.len() + err.len() < PEERS {
        assert!(Instant::now() < deadline, "child watchdog: sends {ok:?} ok, {err:?} failed");
        match me.cq.sread(&mut out, Some(Duration::from_millis(10))) {
            Ok(1) if out[0].op_context < 1000 => ok.push(out[0].op_context),
            Ok(1) => answers.push(out[0].op_context - 1000),
            Err(Error::Avail) => {
                let e = me.cq.readerr().unwrap();
                assert_eq!(e.err, Error::MFile, "error of the send to peer {}", e.entry.op_context);
                err.push(e.entry.op_context);
            }
            _ => {}
        }
    }
    let list = |v: &[u64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
    say("SENT", &format!("{} {}", list(&ok), list(&err)));

    // Serve: the answers of the reachable peers come in while the others are
    // refused, until the parent has seen every send of its peers complete.
    loop {
        assert!(Instant::now() < deadline, "child watchdog: answers {answers:?}");
        if let Some(c) = cmds.try_next() {
            assert_eq!(c, "idle");
            break;
        }
        match me.cq.sread(&mut out, Some(Duration::from_millis(10))) {
            Ok(1) => answers.push(out[0].op_context - 1000),
            Err(Error::Avail) => panic!("error completion: {:?}", me.cq.readerr()),
            _ => {}
        }
    }
    // Idle in a blocking wait: a listener left readable would make this spin.
    let (calls, cpu) = (fabric_tcp::accept_calls(), cpu_ticks());
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        if let Ok(1) = me.cq.sread(&mut out, Some(Duration::from_millis(100))) {
            answers.push(out[0].op_context - 1000);
        }
    }
    say(
        "IDLE",
        &format!(
            "{} {} {} {}",
            list(&answers),
            fabric_tcp::accept_calls(),
            fabric_tcp::accept_calls() - calls,
            cpu_ticks() - cpu
        ),
    );
    let _ = cmds.next(deadline);
    drop(fillers);
}

#[test]
fn child_entry() {
    if std::env::var(ROLE).is_ok() {
        child();
    }
}

// ----- the parent: the peers -----

#[test]
fn out_of_descriptors() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let deadline = Instant::now() + WATCHDOG;
    let mut c = Proc::spawn("starved endpoint", ROLE, "1", |cmd| {
        cmd.env("FI_LOG_LEVEL", "warn").env("FI_PROVIDER", "tcp");
    });
    let child_name: SocketAddr = c.expect("READY", deadline).parse().unwrap();

    let info = rdm_info();
    let p = fabric_tcp::provider();
    let fab = p.fabric(&info).unwrap();
    let dom = fab.domain(&info).unwrap();
    let peers: Vec<common::Rdm> = (0..PEERS).map(|_| common::rdm_endpoint(&dom, &info)).collect();
    let mut bufs = vec![[0u8; 16]; PEERS];
    let mut to_child = Vec::new();
    for (pr, b) in peers.iter().zip(bufs.iter_mut()) {
        to_child.push(pr.av.insert(&[Address::Sockaddr(child_name)]).unwrap()[0]);
        let ri = [IoVec { base: b.as_mut_ptr(), len: 16 }];
        // SAFETY: `bufs` outlives the peers (closed below, before it is dropped).
        unsafe { pr.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap() };
    }
    let names: Vec<String> = peers.iter().map(|pr| pr.ep.getname().unwrap().sockaddr().unwrap().to_string()).collect();
    c.send(&names.join(" "));

    // The child's sends: some arrive, the rest fail with FI_EMFILE there.
    let mut got = vec![false; PEERS];
    let sent = loop {
        if let Some(v) = c.try_expect("SENT") {
            break v;
        }
        for (i, pr) in peers.iter().enumerate() {
            let mut out = [CqEntry::new(0, Caps::empty())];
            if let Ok(1) = pr.cq.read(&mut out) {
                assert_eq!(&bufs[i][..out[0].len], format!("hi {i:05}").as_bytes());
                got[i] = true;
            }
        }
        if Instant::now() > deadline {
            c.fail("watchdog: no SENT line");
        }
    };
    let parse =
        |s: &str| -> Vec<usize> { s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().unwrap()).collect() };
    let (ok, err) = sent.split_once(' ').unwrap_or((&sent, ""));
    let (ok, err) = (parse(ok), parse(err));
    assert!(!ok.is_empty(), "no peer reachable with {ROOM} descriptors");
    assert!(!err.is_empty(), "every peer reachable: the limit did not bite");
    assert_eq!(ok.len() + err.len(), PEERS);
    // What completed at the child arrived (a send completes once written).
    let deadline2 = Instant::now() + WATCHDOG;
    while ok.iter().any(|&i| !got[i]) {
        for &i in &ok {
            let mut out = [CqEntry::new(0, Caps::empty())];
            if let Ok(1) = peers[i].cq.read(&mut out) {
                got[i] = true;
            }
        }
        if Instant::now() > deadline2 {
            c.fail(&format!("watchdog: messages of {ok:?} did not all arrive: {got:?}"));
        }
    }
    for &i in &err {
        assert!(!got[i], "peer {i} got a message whose send failed");
    }

    // Every peer answers: the reachable ones over their connections, the others
    // by connecting, which the child refuses.
    let mut answers = [*b"answer!!"; PEERS];
    for (i, pr) in peers.iter().enumerate() {
        let si = [IoVec { base: answers[i].as_mut_ptr(), len: 8 }];
        // SAFETY: `answers` outlives the completions waited for below.
        unsafe { pr.ep.post_send(&op(&si, to_child[i], 2), OpFlags::empty()).unwrap() };
    }
    let mut outcome: Vec<Option<bool>> = vec![None; PEERS];
    while outcome.iter().any(Option::is_none) {
        for (i, pr) in peers.iter().enumerate() {
            let mut out = [CqEntry::new(0, Caps::empty())];
            match pr.cq.read(&mut out) {
                Ok(1) => outcome[i] = Some(true),
                Err(Error::Avail) => {
                    let _ = pr.cq.readerr();
                    outcome[i] = Some(false);
                }
                _ => {}
            }
        }
        if Instant::now() > deadline2 {
            c.fail(&format!("watchdog: the peers' answers did not all complete: {outcome:?} (reachable {ok:?})"));
        }
    }
    for &i in &ok {
        assert_eq!(outcome[i], Some(true), "answer of reachable peer {i}");
    }
    for &i in &err {
        assert_eq!(outcome[i], Some(false), "answer of unreachable peer {i}: it should be refused");
    }
    c.send("idle");
    let idle = c.expect("IDLE", deadline2 + WATCHDOG);
    let f: Vec<&str> = idle.split(' ').collect();
    let mut answered = parse(f[0]);
    answered.sort_unstable();
    let (calls, idle_calls, idle_cpu): (u64, u64, u64) =
        (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap());
    println!("child: {calls} accept calls in all, {idle_calls} while idle (500 ms), {idle_cpu} CPU ticks while idle");
    c.send("bye");
    let log = c.finish(Instant::now() + WATCHDOG);
    assert_eq!(answered.len(), ok.len(), "the child's answers: {answered:?}, reachable {ok:?}");
    // Each refused connection costs two accept calls (one failing, one with the
    // reserve descriptor), each progress pass that found some one more.
    assert!(calls <= (4 * PEERS + 16) as u64, "{calls} accept calls for {} refused peers: spinning?\n{log}", err.len());
    assert!(idle_calls <= 4, "{idle_calls} accept calls while idle: spinning?\n{log}");
    let warns: Vec<&str> = log.lines().filter(|l| l.contains("<warn>")).collect();
    assert_eq!(warns.len(), 1, "one warning expected:\n{log}");
    assert!(warns[0].contains("out of descriptors"), "{}", warns[0]);
    drop(peers);
    drop(bufs);
}
