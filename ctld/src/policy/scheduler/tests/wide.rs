//! Issue 30 in process: an owner waiting inside its guarantee costs no other job its
//! reservation and holds back only what it needs; a reservation, once held, is kept against
//! single-node jobs ranked above it that hold none, while multi-node jobs plan in priority order;
//! GPUs freed for a team stay held for its queued jobs.

use super::*;

/// Four nodes of 8 GPUs; bob (nlp, no quota) fills three and half the fourth with young runs;
/// alice's two-node job (vision, no quota: a borrower) holds a reservation. carol (audio,
/// guarantee 16) then waits for a whole node, and no run is old enough to preempt. Her wait
/// costs the wide job nothing (it keeps its reservation), and a 1-GPU job of bob's that ends
/// before carol's planned start still starts on the idle half node.
#[test]
fn an_owner_waiting_keeps_other_reservations_and_idle_gpus_in_use() {
    let mut state = teams(&quota("audio", 16));
    state.config_mut().preempt_exempt_time = 10_000;
    let fill: Vec<JobId> =
        ["g=8 t=60", "g=8 t=60", "g=8 t=120", "g=4 t=120"].iter().map(|args| submit(&mut state, "bob", args)).collect();
    assert_eq!(pass(&mut state, NOW), fill);
    let wide = submit(&mut state, "alice", "N=2 g=8 t=60");
    assert!(pass(&mut state, NOW + 1).is_empty());
    let before = state.reservations.get(&wide).cloned().expect("the wide job holds a reservation");
    let owner = submit(&mut state, "carol", "g=8 t=60");
    let small = submit(&mut state, "bob", "g=1 t=30");
    assert_eq!(pass(&mut state, NOW + 2), vec![small], "idle GPUs the owner cannot use are used");
    assert!(victims().is_empty(), "every run is younger than the exempt time");
    assert_eq!(reason(&state, owner), "Resources");
    let after = state.reservations.get(&wide).expect("the wide job's reservation survives the owner's wait");
    assert_eq!((after.start, after.since), (before.start, before.since));
    assert!(state.reservations.contains_key(&owner), "the owner holds what it needs");
}

/// A wide job's reservation is kept against jobs ranked above it that hold none: a later
/// whole-node job ranked first plans around it (not on its nodes, which drain an hour before the
/// others), and when those nodes drain, the wide job starts there, not the higher-ranked job.
#[test]
fn a_held_reservation_is_kept_against_jobs_ranked_above() {
    let mut state = teams("");
    let early = two_drain_times(&mut state);
    let wide = submit(&mut state, "alice", "N=2 g=8 t=60");
    assert!(pass(&mut state, NOW + 1).is_empty());
    assert_eq!(state.reservations[&wide].start, NOW + 3600);
    // The fair-share factor flips: a later whole-node job now ranks above the wide job.
    let high = submit(&mut state, "carol", "g=8 t=600");
    rank(&mut state, &[high, wide]);
    assert!(pass(&mut state, NOW + 2).is_empty());
    assert_eq!(state.reservations[&wide].start, NOW + 3600, "the wide job keeps its planned start");
    assert_eq!(state.reservations[&high].start, NOW + 7200);
    complete(&mut state, &early, NOW + 3000);
    assert_eq!(pass(&mut state, NOW + 3000), vec![wide], "the wide job starts on its drained nodes");
    assert_eq!(reason(&state, high), "Resources");
}

/// Among multi-node jobs priority decides: a later two-node job ranked above a held two-node
/// reservation plans on its nodes (they drain first), and the job below is planned afresh
/// behind it (issue 16's wide job at the head of the queue, under two-node jobs that planned
/// before it was submitted).
#[test]
fn a_multi_node_job_ranked_above_takes_a_held_reservation() {
    let mut state = teams("");
    let early = two_drain_times(&mut state);
    let low = submit(&mut state, "alice", "N=2 g=8 t=60");
    assert!(pass(&mut state, NOW + 1).is_empty());
    assert_eq!(state.reservations[&low].start, NOW + 3600);
    let high = submit(&mut state, "carol", "N=2 g=8 t=60");
    rank(&mut state, &[high, low]);
    assert!(pass(&mut state, NOW + 2).is_empty());
    assert_eq!(state.reservations[&high].start, NOW + 3600, "the job ranked above gets the nodes that drain first");
    assert_eq!(state.reservations[&low].start, NOW + 7200, "the one below is planned behind it");
    complete(&mut state, &early, NOW + 3000);
    assert_eq!(pass(&mut state, NOW + 3000), vec![high]);
}

/// Fills the four nodes with whole-node jobs of bob's: two that reach their limits in an hour,
/// two in two hours; returns the first two.
fn two_drain_times(state: &mut State) -> Vec<JobId> {
    let early: Vec<JobId> = (0..2).map(|_| submit(state, "bob", "g=8 t=60")).collect();
    let late: Vec<JobId> = (0..2).map(|_| submit(state, "bob", "g=8 t=120")).collect();
    let mut fill = early.clone();
    fill.extend(&late);
    assert_eq!(pass(state, NOW), fill);
    early
}

/// Ends `jobs` at `at`.
fn complete(state: &mut State, jobs: &[JobId], at: UnixTime) {
    for job_id in jobs {
        state.release_job(*job_id, at);
        state.jobs.get_mut(job_id).unwrap().info.state = Some(JobState::Completed);
    }
}

/// audio's eight 1-GPU jobs arrive one after another while bob's 1-GPU borrowers queue, with
/// `preempt_exempt_time = 0`: the first preempts one 8-GPU job, and what that victim frees
/// beyond it stays held for audio's next jobs, so no borrower starts there to be preempted at
/// age 0 (which cost seven more preemptions).
#[test]
fn gpus_freed_for_a_team_stay_held_for_its_queued_jobs() {
    let mut state = teams(&(quota("vision", 8) + &quota("nlp", 8) + &quota("audio", 16)));
    let fill: Vec<JobId> =
        (0..4).map(|i| submit(&mut state, if i < 2 { "alice" } else { "bob" }, "g=8 t=600")).collect();
    assert_eq!(pass(&mut state, NOW), fill);
    let flood: Vec<JobId> = (0..16).map(|_| submit(&mut state, "bob", "g=1 t=60")).collect();
    let mut all = Vec::new();
    let mut small = Vec::new();
    small.push(submit(&mut state, "carol", "g=1 t=60"));
    pass(&mut state, NOW + 10);
    all.extend(victims());
    assert_eq!(all.len(), 1);
    requeued(&mut state, all[0], NOW + 12);
    pass(&mut state, NOW + 12);
    assert_eq!(state.jobs[&small[0]].info.state(), JobState::Running);
    for k in 1..8 {
        small.push(submit(&mut state, "carol", "g=1 t=60"));
        pass(&mut state, NOW + 12 + k);
        all.extend(victims());
    }
    assert_eq!(all.len(), 1, "one 8-GPU victim: {all:?}");
    assert!(small.iter().all(|j| state.jobs[j].info.state() == JobState::Running));
    assert!(flood.iter().all(|j| state.jobs[j].info.state() == JobState::Pending));
}
