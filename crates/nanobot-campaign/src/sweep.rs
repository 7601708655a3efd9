//! Family 3, the I/O-error sweep: count the file operations of the fixed workload, then run
//! it again once per operation with that one operation failing (EIO, ENOSPC, or a write cut
//! short and then ENOSPC). The call that meets the fault must return a typed error, never
//! panic; the workload then carries on as a program would (reloading what it holds); at the
//! end, the stores reopened without faults must hold everything that was acknowledged,
//! undamaged (the process did not crash, so every level promises everything).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use nanobot_fs_support::observe::{self, Fault, FaultPlan};

use crate::Plan;
use crate::report::Family;
use crate::workload::{self, Level, fresh_dir};

/// Steps of the swept workload (each of its operations is failed in turn).
const STEPS: u64 = 30;

pub(crate) fn run(plan: &Plan) -> Family {
    let mut family = Family::default();
    let scratch = plan.scratch.join("sweep");
    let mut totals = Totals::default();
    let seed = plan.seed ^ 0x5e_e9;
    for (i, level) in [Level::None, Level::Always].into_iter().enumerate() {
        let dir = scratch.join(level.name());
        let count = match count_operations(&dir, level, seed) {
            Ok(count) => count,
            Err(e) => {
                totals.failed_runs += 1;
                family.fail(format!("{}: counting: {e}", level.name()));
                continue;
            }
        };
        family.set(
            &format!("operations_{}", level.name().replace('-', "_")),
            count,
        );
        // The whole sweep, or every `stride`-th operation with the faults in turn.
        let stride = plan.sweep_stride.max(1);
        let mut n = i as u64 % stride;
        while n < count {
            let faults: Vec<Fault> = if stride == 1 {
                Fault::ALL.to_vec()
            } else {
                vec![Fault::ALL[(n / stride) as usize % Fault::ALL.len()]]
            };
            for fault in faults {
                totals.runs += 1;
                if let Err(e) = one_run(&dir, level, seed, n, fault, &mut totals, &mut family) {
                    totals.failed_runs += 1;
                    family.fail(format!(
                        "{}: {} on operation {n}: {e}",
                        level.name(),
                        fault.name()
                    ));
                }
            }
            n += stride;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    family.set("runs", totals.runs);
    family.set("faults_injected", totals.fired);
    family.set("errors_returned", totals.errors);
    family.set("torn_tails_cut_and_reported", totals.torn_tails);
    family.set("torn_line1_rebuilt_and_reported", totals.torn_line1s);
    family.zero("panics", totals.panics);
    family.zero("violations", totals.violations);
    family.zero("failed_runs", totals.failed_runs);
    family
}

#[derive(Debug, Default)]
struct Totals {
    runs: u64,
    fired: u64,
    errors: u64,
    torn_tails: u64,
    torn_line1s: u64,
    panics: u64,
    violations: u64,
    failed_runs: u64,
}

/// How many watched operations the workload does, opening the stores included.
fn count_operations(dir: &Path, level: Level, seed: u64) -> Result<u64, String> {
    let work = fresh_dir(dir)?;
    let counter = Arc::new(FaultPlan::counting());
    let _watching = observe::watch(&work, counter.clone());
    let stores = workload::open(&work, level, None)?;
    let run = crate::current_thread()?.block_on(workload::run(&stores, seed, STEPS, &|_| {}));
    if let Some(error) = run.errors.first() {
        return Err(format!("the workload failed without any fault: {error}"));
    }
    Ok(counter.seen())
}

fn one_run(
    dir: &Path,
    level: Level,
    seed: u64,
    n: u64,
    fault: Fault,
    totals: &mut Totals,
    family: &mut Family,
) -> Result<(), String> {
    let work = fresh_dir(dir)?;
    let runtime = crate::current_thread()?;
    let plan = Arc::new(FaultPlan::failing(n, fault));
    let outcome = {
        let _watching = observe::watch(&work, plan.clone());
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            // Opening may meet the fault too: then it must fail cleanly and open next time.
            let stores = match workload::open(&work, level, None) {
                Ok(stores) => stores,
                Err(_) => workload::open(&work, level, None)?,
            };
            Ok::<_, String>(runtime.block_on(workload::run(&stores, seed, STEPS, &|_| {})))
        }))
    };
    let fired = plan.fired();
    if fired.is_some() {
        totals.fired += 1;
    }
    let run = match outcome {
        Err(panic) => {
            totals.panics += 1;
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            family.fail(format!(
                "{}: {} on operation {n}: a panic: {message} ({fired:?})",
                level.name(),
                fault.name()
            ));
            return Ok(());
        }
        Ok(run) => run?,
    };
    totals.errors += run.errors.len() as u64;
    // No crash: whatever the level, everything acknowledged must be there.
    let found = runtime.block_on(workload::check(
        &work,
        level,
        Level::Always,
        &run.acks,
        &run.acks,
    ));
    totals.torn_tails += found.torn_tails;
    totals.torn_line1s += found.torn_line1s;
    totals.violations += found.violations.len() as u64;
    for violation in found.violations {
        family.fail(format!(
            "{}: {} on operation {n} (seed {seed}; {}): {violation}",
            level.name(),
            fault.name(),
            fired.as_deref().unwrap_or("did not fire")
        ));
    }
    Ok(())
}
