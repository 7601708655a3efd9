//! Family 2, simulated power loss: the file workload runs on the real disk under the
//! crash-filesystem double's recorder ([`nanobot_fs_support::crash`]); then, at seeded crash points,
//! the state a power loss could leave (unsynced writes dropped, torn at a sector or
//! reordered; unsynced directory entries lost) is written into a fresh directory and the
//! stores are opened there as after a reboot and checked against what was acknowledged
//! before the crash: at `always` everything acknowledged, at `turn-end` everything
//! acknowledged before the last flush (entries and documents as their own promises say),
//! at `none` only a suffix may be missing; never damage at any level.

use std::path::Path;
use std::sync::Arc;

use nanobot_fs_support::crash::Recorder;
use nanobot_fs_support::observe;
use nanobot_session_store::BrokenRule;

use crate::Plan;
use crate::report::Family;
use crate::rng::Rng;
use crate::workload::{self, Ack, Level, fresh_dir};

/// Steps of one workload: a few hundred file operations.
const STEPS: u64 = 60;

pub(crate) fn run(plan: &Plan) -> Family {
    run_with(plan, None)
}

/// The family over a session store with one rule switched off (a test shows it notices).
pub(crate) fn run_with(plan: &Plan, broken: Option<BrokenRule>) -> Family {
    let mut family = Family::default();
    let scratch = plan.scratch.join("power");
    let mut totals = Totals::default();
    let mut rng = Rng::new(plan.seed ^ 0x9043_1055);
    for level in Level::ALL {
        for w in 0..plan.power_workloads {
            let seed = rng.next_u64();
            let place = scratch.join(format!("{}-{w}", level.name()));
            if let Err(e) =
                one_workload(plan, &place, level, seed, broken, &mut totals, &mut family)
            {
                totals.failed_runs += 1;
                family.fail(format!("{} workload seed {seed}: {e}", level.name()));
            }
            let _ = std::fs::remove_dir_all(&place);
        }
    }
    family.set("workloads", totals.workloads);
    family.set("operations_recorded", totals.operations);
    family.set("fsyncs_recorded", totals.syncs);
    family.set("crash_points", totals.points);
    family.set("states_that_lost_unsynced_writes", totals.lossy_states);
    family.set("writes_dropped", totals.dropped_writes);
    family.set("writes_torn", totals.torn_writes);
    family.set("directory_entries_dropped", totals.dropped_entries);
    family.set("torn_tails_cut_and_reported", totals.torn_tails);
    family.set("torn_line1_rebuilt_and_reported", totals.torn_line1s);
    family.zero("violations", totals.violations);
    family.zero("untracked_file_operations", totals.untracked);
    family.zero("failed_runs", totals.failed_runs);
    family
}

#[derive(Debug, Default)]
struct Totals {
    workloads: u64,
    operations: u64,
    syncs: u64,
    points: u64,
    lossy_states: u64,
    dropped_writes: u64,
    torn_writes: u64,
    dropped_entries: u64,
    torn_tails: u64,
    torn_line1s: u64,
    violations: u64,
    untracked: u64,
    failed_runs: u64,
}

fn one_workload(
    plan: &Plan,
    place: &Path,
    level: Level,
    seed: u64,
    broken: Option<BrokenRule>,
    totals: &mut Totals,
    family: &mut Family,
) -> Result<(), String> {
    let work = fresh_dir(&place.join("work"))?;
    let recorder = Arc::new(Recorder::start(&work).map_err(|e| e.to_string())?);
    let run = {
        let _watching = observe::watch(&work, recorder.clone());
        let stores = workload::open(&work, level, broken)?;
        let mark = |i: usize| recorder.mark(i as u64);
        crate::current_thread()?.block_on(workload::run(&stores, seed, STEPS, &mark))
    };
    if let Some(error) = run.errors.first() {
        return Err(format!("the workload failed without any fault: {error}"));
    }
    let trace = recorder.trace();
    totals.workloads += 1;
    totals.operations += trace.operations() as u64;
    totals.syncs += trace.syncs() as u64;
    totals.untracked += trace.untracked();

    let mut rng = Rng::new(seed);
    let runtime = crate::current_thread()?;
    for n in 0..plan.power_points {
        // The last point too: everything ran, and the power went before any write-back.
        let point = if n == 0 {
            trace.operations()
        } else {
            rng.below(trace.operations() as u64 + 1) as usize
        };
        let state_seed = rng.next_u64();
        let state = trace.crash_state(point, state_seed);
        totals.points += 1;
        totals.dropped_writes += state.dropped_writes as u64;
        totals.torn_writes += state.torn_writes as u64;
        totals.dropped_entries += state.dropped_entries as u64;
        if state.dropped_writes + state.torn_writes + state.dropped_entries > 0 {
            totals.lossy_states += 1;
        }
        let after = fresh_dir(&place.join("after"))?;
        state.materialize(&after).map_err(|e| e.to_string())?;
        let acks: Vec<Ack> = trace
            .marks_before(point)
            .into_iter()
            .filter_map(|i| run.acks.get(i as usize).cloned())
            .collect();
        let found = runtime.block_on(workload::check(&after, level, level, &acks, &run.acks));
        totals.torn_tails += found.torn_tails;
        totals.torn_line1s += found.torn_line1s;
        totals.violations += found.violations.len() as u64;
        for violation in found.violations {
            family.fail(format!(
                "{}: workload seed {seed}, crash after operation {point} of {}, state seed {state_seed}: {violation}",
                level.name(),
                trace.operations()
            ));
        }
    }
    Ok(())
}
