//! The state machines of a job, an attempt and a parked record, as their
//! one transition table each (`can_become`) says: a walk of any proposed
//! moves never leaves an end; every state can be reached from the first and
//! can reach an end (no trap, so no record waits for ever); and what a
//! reviewer may approve always includes a way to close, and never spends
//! for a job its owner cancelled.

use crate::model::{AttemptState, JobStatus, ParkedStage, ParkedState, ReviewAction};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// The states (by index into `ALL`) reachable from `from` by allowed moves.
fn reachable(from: usize, n: usize, can: impl Fn(usize, usize) -> bool) -> BTreeSet<usize> {
    let mut seen = BTreeSet::from([from]);
    let mut frontier = vec![from];
    while let Some(s) = frontier.pop() {
        for next in 0..n {
            if can(s, next) && seen.insert(next) {
                frontier.push(next);
            }
        }
    }
    seen
}

/// From the first state every state is reachable; from every state an end
/// is; from an end, nothing else.
fn whole_and_without_traps<S: Copy + PartialEq + std::fmt::Debug>(
    all: &[S],
    first: S,
    can: impl Fn(S, S) -> bool,
    ended: impl Fn(S) -> bool,
) {
    let can = |a: usize, b: usize| can(all[a], all[b]);
    let first = all.iter().position(|s| *s == first).unwrap();
    assert_eq!(
        reachable(first, all.len(), can).len(),
        all.len(),
        "unreachable states"
    );
    for (i, s) in all.iter().enumerate() {
        let onward = reachable(i, all.len(), can);
        assert!(onward.iter().any(|e| ended(all[*e])), "{s:?} cannot end");
        if ended(*s) {
            assert_eq!(onward.len(), 1, "{s:?} moves on after its end");
        }
    }
}

#[test]
fn every_state_is_reachable_and_none_is_a_trap() {
    whole_and_without_traps(
        &JobStatus::ALL,
        JobStatus::Queued,
        JobStatus::can_become,
        JobStatus::is_terminal,
    );
    whole_and_without_traps(
        &AttemptState::ALL,
        AttemptState::Submitting,
        AttemptState::can_become,
        |a| !a.is_open(),
    );
    whole_and_without_traps(
        &ParkedState::ALL,
        ParkedState::Open,
        ParkedState::can_become,
        |p| !p.is_active(),
    );
}

/// Whatever the job's state, a reviewer can always end a parked record
/// (`accept_failure`); for a job its owner cancelled, nothing that would
/// call a provider again is offered.
#[test]
fn a_reviewer_can_always_close_and_never_spends_for_a_cancelled_job() {
    let spends = [
        ReviewAction::ResumePoll,
        ReviewAction::RetryDelivery,
        ReviewAction::NewAttempt,
    ];
    for stage in ParkedStage::ALL {
        for status in JobStatus::ALL {
            let allowed = stage.allows_for(status);
            assert!(
                allowed.contains(&ReviewAction::AcceptFailure),
                "{stage:?} {status:?}"
            );
            assert!(
                allowed.iter().all(|a| stage.allows().contains(a)),
                "{stage:?} {status:?}"
            );
            if status == JobStatus::Cancelled {
                assert!(
                    !allowed.iter().any(|a| spends.contains(a)),
                    "{stage:?}: {allowed:?}"
                );
            }
        }
    }
}

proptest! {
    /// Any sequence of proposed moves, applied where the table allows: once
    /// a job, attempt or record has ended, every later move is refused.
    #[test]
    fn no_walk_leaves_an_end(
        moves in prop::collection::vec((0..JobStatus::ALL.len(), 0..AttemptState::ALL.len(), 0..ParkedState::ALL.len()), 0..40),
    ) {
        let (mut j, mut a, mut p) = (JobStatus::Queued, AttemptState::Submitting, ParkedState::Open);
        let (mut j_ended, mut a_ended, mut p_ended) = (false, false, false);
        for (nj, na, np) in moves {
            let (nj, na, np) = (JobStatus::ALL[nj], AttemptState::ALL[na], ParkedState::ALL[np]);
            if j.can_become(nj) { prop_assert!(!j_ended, "{:?} -> {:?}", j, nj); j = nj; }
            if a.can_become(na) { prop_assert!(!a_ended, "{:?} -> {:?}", a, na); a = na; }
            if p.can_become(np) { prop_assert!(!p_ended, "{:?} -> {:?}", p, np); p = np; }
            j_ended |= j.is_terminal();
            a_ended |= !a.is_open();
            p_ended |= !p.is_active();
            // Only an ended job's money is settled: refunds need an end.
            prop_assert!(!j.refundable() || j.is_terminal());
        }
    }
}
