//! The conformance suite: one set of tests of the public API, instantiated per
//! provider (as rustls instantiates its tests per crypto provider).
//!
//! `conformance_suite!(tcp, "tcp")` makes `mod tcp { mod msg { #[test] fn ... } ... }`
//! where every test runs against the provider named `"tcp"`. A test first checks the
//! provider's `Info` (caps, endpoint types, limits) and, when a capability is
//! absent, reports the skip (`fabric_testkit::absent`: a `skipped (absent)` line
//! on standard error and in `FABRIC_SKIP_LOG`) and returns: every provider passes
//! the same semantics, as far as it offers them. A provider that offers nothing
//! at all is a missing environment (`fabric_testkit::skip`), which fails the test
//! where `FABRIC_REQUIRE` names the provider.
//!
//! Tests run on a thread under a watchdog and every wait has its own, so a hang
//! fails the test instead of blocking the run. Tests marked
//! `#[ignore = "bug: ..."]` expose a known bug of a provider or of the fabric crate:
//! run them with `cargo test -p fabric --test conformance -- --ignored`.
//!
//! The test functions live in `conformance/<area>.rs` as
//! `pub fn name(prov: &'static str)`; the list below names each once (a function
//! left out of the list is dead code, which the compiler reports).

#![allow(missing_docs)]

#[path = "conformance/common.rs"]
mod common;

#[path = "conformance/atomic.rs"]
mod atomic;
#[path = "conformance/av.rs"]
mod av;
#[path = "conformance/cm.rs"]
mod cm;
#[path = "conformance/cq.rs"]
mod cq;
#[path = "conformance/discovery.rs"]
mod discovery;
#[path = "conformance/errors.rs"]
mod errors;
#[path = "conformance/msg.rs"]
mod msg;
#[path = "conformance/rma.rs"]
mod rma;
#[path = "conformance/tagged.rs"]
mod tagged;
#[path = "conformance/waitset.rs"]
mod waitset;

/// Instantiate the tests of the listed areas for one provider.
macro_rules! suite_tests {
    ($prov:literal; $( $area:ident : [ $( $(#[$meta:meta])* $test:ident ),* $(,)? ] ),* $(,)?) => {
        $(
            mod $area {
                $(
                    #[test]
                    $(#[$meta])*
                    fn $test() {
                        crate::common::run(
                            concat!($prov, "::", stringify!($area), "::", stringify!($test)),
                            $prov,
                            crate::$area::$test,
                        );
                    }
                )*
            }
        )*
    };
}

/// The whole suite for one provider: `conformance_suite!(tcp, "tcp")` makes
/// `mod tcp` with every test run against the provider named `"tcp"`.
macro_rules! conformance_suite {
    ($name:ident, $prov:literal) => {
        mod $name {
            suite_tests! { $prov;
                discovery: [
                    by_provider_name,
                    ep_types,
                    info_attributes_are_consistent,
                    caps_filter_and_narrow,
                    numeric_node_and_service,
                    node_by_name,
                    service_by_name,
                    source_node_and_service,
                    source_address_hint,
                    domain_and_fabric_names,
                    impossible_hints_give_nodata,
                    mode_hints,
                ],
                msg: [
                    rdm_sizes,
                    msg_sizes,
                    rdm_vectored,
                    msg_vectored,
                    rdm_iov_limit,
                    msg_iov_limit,
                    rdm_remote_cq_data,
                    msg_remote_cq_data,
                    rdm_inject,
                    msg_inject,
                    rdm_send_after_send_order,
                    msg_send_after_send_order,
                    rdm_unexpected,
                    msg_unexpected,
                    rdm_truncation,
                    msg_truncation,
                    rdm_cancel_recv,
                    msg_cancel_recv,
                    rdm_multi_recv,
                    msg_multi_recv,
                    rdm_multi_recv_unexpected,
                    rdm_directed_recv,
                    rdm_send_to_self,
                    rdm_buf_len_and_capacity,
                    rdm_simultaneous_first_sends,
                    rdm_many_to_one,
                    rdm_multi_recv_rendezvous,
                    rdm_truncation_vectored,
                    rdm_concurrent_senders,
                    rdm_cancel_after_match,
                    rdm_multi_recv_view_outlives_release,
                    rdm_multi_recv_overflow,
                    rdm_delivery_complete,
                    msg_delivery_complete,
                    rdm_delivery_complete_multi_recv,
                ],
                tagged: [
                    rdm_tag_and_ignore,
                    msg_tag_and_ignore,
                    rdm_posting_order,
                    rdm_tagged_and_untagged_are_separate,
                    rdm_unexpected_tagged,
                    msg_unexpected_tagged,
                    rdm_peek,
                    rdm_peek_claim,
                    rdm_peek_discard,
                    rdm_directed_tagged,
                ],
                av: [
                    table,
                    map,
                    bad_address_format,
                    send_to_removed_address,
                    send_to_unknown_address,
                    rdm_source_not_in_av,
                ],
                cm: [
                    conn_data_both_ways,
                    conn_data_too_large,
                    reject_with_data,
                    shutdown_both_sides,
                    connect_to_nothing,
                    peer_names,
                    data_right_after_accept,
                    client_gone_before_accept,
                ],
                errors: [
                    no_cq_returns_buffers,
                    ops_before_enable,
                    double_cq_bind,
                    multicast_flag_needs_the_cap,
                    msg_send_unconnected,
                    rdm_receiver_dies_during_rendezvous,
                    msg_receiver_dies_during_rendezvous,
                    rdm_receiver_dies_with_unmatched_rendezvous,
                    msg_receiver_dies_with_unmatched_rendezvous,
                    rdm_receiver_dies_with_sends_queued,
                    msg_receiver_dies_with_sends_queued,
                    cq_overrun,
                    rdm_close_cancels_posted,
                    msg_close_cancels_posted,
                    rdm_send_to_dead_peer,
                    rdm_peer_restart,
                    rdm_close_cancels_pending_sends,
                    msg_close_cancels_pending_sends,
                    msg_posted_receives_survive_peer_shutdown,
                ],
                cq: [
                    sread_times_out,
                    sread_returns_completion,
                    wait_fd_is_pollable,
                    signal_wakes_sread,
                    read_batch,
                    eq_sread_times_out,
                    eq_write_reads_back,
                    counters_count_completions,
                    counter_wait,
                    sread_reports_error_at_head,
                    separate_tx_rx_queues,
                    auto_progress,
                ],
                rma: [
                    rdm_write_read_sizes,
                    msg_write_read_sizes,
                    rdm_vectored,
                    msg_vectored,
                    rdm_writedata,
                    msg_writedata,
                    rdm_inject_write,
                    msg_inject_write,
                    rdm_remote_counters,
                    msg_remote_counters,
                    rdm_remote_counters_large,
                    msg_remote_counters_large,
                    rdm_access_errors,
                    msg_access_errors,
                    rdm_access_errors_large,
                    msg_access_errors_large,
                ],
                waitset: [
                    two_endpoints_one_thread,
                    wakes_for_a_peer_thread,
                    wait_set_times_out,
                    wait_set_counter,
                    wait_set_event_queue,
                    poll_set_contexts,
                ],
                atomic: [
                    atomic_valid_rules,
                    rdm_every_operation,
                    msg_every_operation,
                    rdm_large_operands,
                    msg_large_operands,
                    rdm_access_errors,
                    msg_access_errors,
                ],
            }
        }
    };
}

#[cfg(feature = "tcp")]
conformance_suite!(tcp, "tcp");

#[cfg(feature = "shm")]
conformance_suite!(shm, "shm");
#[cfg(feature = "udp")]
conformance_suite!(udp, "udp");
// verbs runs where a device exists: in the QEMU guest of
// `providers/verbs/guest/ci.sh` (Soft-RoCE); elsewhere every test skips, since
// `getinfo` finds no device.
#[cfg(feature = "verbs")]
conformance_suite!(verbs, "verbs");

/// The shm suite again in a child process with `FI_SHM_DISABLE_CMA=1`, so that the
/// fallback (large messages and RMA as chunks through the shared segment) passes
/// every test too. (The setting is read once per process, hence the child.)
#[cfg(feature = "shm")]
#[test]
fn shm_without_cross_memory_attach() {
    if std::env::var_os("FI_SHM_DISABLE_CMA").is_some() {
        // The child itself, or a run that chose the setting: nothing to add.
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["shm::", "--test-threads=2"])
        .env("FI_SHM_DISABLE_CMA", "1")
        .output()
        .expect("run the shm suite in a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "shm suite without CMA failed:\n{stdout}\n{stderr}");
    let summary = stdout.lines().find(|l| l.starts_with("test result:")).unwrap_or_default();
    println!("shm without CMA: {summary}");
    let passed: usize = summary
        .split(';')
        .find_map(|p| p.trim().strip_prefix("test result: ok.").map(str::trim))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= 100, "the child ran the whole suite ({summary})");
}
