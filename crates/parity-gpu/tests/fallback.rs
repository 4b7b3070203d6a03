//! The dispatcher answers every batch correctly when its GPU fails: an error on submit, on wait,
//! or a lost device, in `gpu` mode (every batch meant for the GPU) and `auto` mode. After a
//! failure the GPU is out of service and reported so; the CPU computes everything.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Rng, Stripe, open_engine};
use tessera_parity::{Kernel, Naive, Scalar};
use tessera_parity_gpu::{
    CalibrationConfig, Completion, Dispatcher, EngineConfig, EngineKind, EngineMode, Fault, Job,
    StripeOperation, StripeOutput, StripeRef,
};

/// A fast calibration: three small batch sizes, one round each.
fn quick_calibration() -> CalibrationConfig {
    CalibrationConfig {
        batch_bytes: vec![64 << 10, 256 << 10, 1 << 20],
        time_per_size: Duration::from_millis(1),
        max_rounds: 2,
        latency_rounds: 3,
        ..CalibrationConfig::default()
    }
}

fn dispatcher(test: &str, mode: EngineMode) -> Option<Dispatcher> {
    let engine = open_engine(test, EngineConfig::default())?;
    let cpu: Arc<dyn Kernel> = Arc::new(Scalar);
    Some(Dispatcher::with_engines(
        cpu,
        vec![engine],
        mode,
        &quick_calibration(),
    ))
}

/// Runs a batch of `count` random 6+2 stripes (P+Q, and two-data recovery) through the
/// dispatcher and checks every output against the naive kernel's P and Q and the data.
fn run_and_check(dispatcher: &mut Dispatcher, rng: &mut Rng, count: usize) -> Completion {
    let stripes: Vec<Stripe> = (0..count)
        .map(|_| Stripe::random(rng, 6, 4096 + 3))
        .collect();
    let survivors: Vec<Vec<&[u8]>> = stripes.iter().map(|s| s.survivors(&[1, 4])).collect();
    let full: Vec<Vec<&[u8]>> = stripes.iter().map(|s| s.survivors(&[])).collect();
    let parity: Vec<[&[u8]; 2]> = stripes.iter().map(|s| [&s.p[..], &s.q[..]]).collect();
    let mut outputs: Vec<(Vec<u8>, Vec<u8>)> = stripes
        .iter()
        .map(|s| (vec![0u8; s.p.len()], vec![0u8; s.p.len()]))
        .collect();
    let jobs: Vec<Job<'_>> = outputs
        .iter_mut()
        .enumerate()
        .map(|(i, (first, second))| Job {
            stripe: if i % 2 == 0 {
                StripeRef {
                    operation: StripeOperation::Pq,
                    data: &full[i],
                    parity: &[],
                }
            } else {
                StripeRef {
                    operation: StripeOperation::RecoverTwoData { x: 1, y: 4 },
                    data: &survivors[i],
                    parity: &parity[i],
                }
            },
            output: StripeOutput {
                first,
                second: Some(second),
            },
        })
        .collect();
    let completion = dispatcher.run(jobs);
    for (i, (stripe, (first, second))) in stripes.iter().zip(&outputs).enumerate() {
        if i % 2 == 0 {
            assert_eq!((first, second), (&stripe.p, &stripe.q), "stripe {i} P+Q");
        } else {
            assert_eq!(
                (first, second),
                (&stripe.data[1], &stripe.data[4]),
                "stripe {i} recovery"
            );
        }
    }
    completion
}

#[test]
fn forced_gpu_runs_on_the_gpu_until_it_fails_then_on_the_cpu() {
    for fault in [
        Fault::FailNextSubmit,
        Fault::FailNextWait,
        Fault::LoseDevice,
    ] {
        let Some(mut dispatcher) = dispatcher(
            "forced_gpu_runs_on_the_gpu_until_it_fails_then_on_the_cpu",
            EngineMode::Gpu,
        ) else {
            return;
        };
        let mut rng = Rng::new(21);
        let completion = run_and_check(&mut dispatcher, &mut rng, 5);
        assert_eq!(
            completion,
            Completion {
                engine: "gpu0".to_string(),
                fell_back: false
            }
        );
        dispatcher
            .gpu_engine_mut(0)
            .expect("one GPU")
            .inject_fault(fault);
        let completion = run_and_check(&mut dispatcher, &mut rng, 7);
        assert_eq!(
            completion,
            Completion {
                engine: "cpu".to_string(),
                fell_back: true
            },
            "{fault:?}"
        );
        // Afterwards too: the GPU stays out of service, the answers stay right.
        for _ in 0..3 {
            let completion = run_and_check(&mut dispatcher, &mut rng, 3);
            assert_eq!(completion.engine, "cpu");
        }
        let reports = dispatcher.reports();
        let gpu = reports
            .iter()
            .find(|report| report.kind == EngineKind::Gpu)
            .expect("the GPU is still reported");
        assert!(gpu.failure.is_some(), "{fault:?}: failure reported");
        assert_eq!(dispatcher.routing_threshold_bytes(), None);
    }
}

#[test]
fn a_failure_between_submit_and_wait_is_redone_on_the_cpu() {
    let Some(mut dispatcher) = dispatcher(
        "a_failure_between_submit_and_wait_is_redone_on_the_cpu",
        EngineMode::Gpu,
    ) else {
        return;
    };
    let mut rng = Rng::new(22);
    let stripe = Stripe::random(&mut rng, 4, 5000);
    let data = stripe.survivors(&[]);
    let (mut p, mut q) = (vec![0u8; 5000], vec![0u8; 5000]);
    let pending = dispatcher.submit(vec![Job {
        stripe: StripeRef {
            operation: StripeOperation::Pq,
            data: &data,
            parity: &[],
        },
        output: StripeOutput {
            first: &mut p,
            second: Some(&mut q),
        },
    }]);
    dispatcher
        .gpu_engine_mut(0)
        .expect("one GPU")
        .inject_fault(Fault::LoseDevice);
    let completion = dispatcher.wait(pending);
    assert!(completion.fell_back);
    assert_eq!((&p, &q), (&stripe.p, &stripe.q));
}

#[test]
fn cpu_mode_never_touches_the_gpu_and_auto_mode_reports_calibration() {
    let Some(mut cpu_only) = dispatcher(
        "cpu_mode_never_touches_the_gpu_and_auto_mode_reports_calibration",
        EngineMode::Cpu,
    ) else {
        return;
    };
    let mut rng = Rng::new(23);
    let completion = run_and_check(&mut cpu_only, &mut rng, 4);
    assert_eq!(
        completion,
        Completion {
            engine: "cpu".to_string(),
            fell_back: false
        }
    );

    let Some(mut auto) = dispatcher(
        "cpu_mode_never_touches_the_gpu_and_auto_mode_reports_calibration",
        EngineMode::Auto,
    ) else {
        return;
    };
    // Whichever engine auto picks, the answers are right.
    run_and_check(&mut auto, &mut rng, 4);
    let reports = auto.reports();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0].name, "cpu");
    assert_eq!(reports[0].min_batch_bytes, Some(0));
    assert_eq!(reports[1].name, "gpu0");
    assert!(reports[1].submit_latency_us.is_some_and(|us| us > 0.0));
    for report in &reports {
        assert_eq!(report.calibration.len(), 3);
        assert!(report.calibration.iter().all(|point| point.gbps > 0.0));
    }
    // The JSON shape `tessera info --json` shows.
    let json = serde_json::to_value(&reports).expect("serializes");
    let gpu = &json[1];
    assert_eq!(gpu["kind"], "gpu");
    assert!(gpu["adapter"].is_string());
    assert!(gpu["calibration"][0]["batch_bytes"].is_u64());
    assert!(gpu["calibration"][0]["gbps"].is_f64());
    assert!(gpu.get("min_batch_bytes").is_some());
    assert_eq!(json[0]["kind"], "cpu");
    assert!(json[0]["adapter"].is_null());
}

/// Without any GPU the dispatcher still works, in every mode (gpu mode reports the fallback).
#[test]
fn no_gpu_at_all_means_the_cpu() {
    let cpu: Arc<dyn Kernel> = Arc::new(Naive);
    let mut rng = Rng::new(24);
    for (mode, fell_back) in [
        (EngineMode::Cpu, false),
        (EngineMode::Auto, false),
        (EngineMode::Gpu, true),
    ] {
        let mut dispatcher =
            Dispatcher::with_engines(cpu.clone(), Vec::new(), mode, &quick_calibration());
        let completion = run_and_check(&mut dispatcher, &mut rng, 2);
        assert_eq!(
            completion,
            Completion {
                engine: "cpu".to_string(),
                fell_back
            }
        );
        assert_eq!(dispatcher.reports().len(), 1);
    }
}
