//! `tessera info`.

use tessera_api::InfoView;

use super::{Column, Table, key_values, or_dash};
use crate::style::Style;
use crate::units::{format_duration, format_size};

/// `tessera info`.
pub fn describe_info(style: Style, info: &InfoView) -> String {
    let io = match (&info.io.reason, info.io.io_uring) {
        (_, true) => info.io.driver.clone(),
        (Some(reason), false) => format!("{} ({reason})", info.io.driver),
        (None, false) => info.io.driver.clone(),
    };
    let mut out = key_values(
        style,
        &format!("Tessera daemon {}", info.version),
        &[
            ("uptime", format_duration(info.uptime_seconds)),
            ("I/O driver", io),
            ("parity engine", info.parity_engine.clone()),
            (
                "parity offload",
                if info.parity_offload {
                    "full-stripe work batched to the dispatcher".to_string()
                } else {
                    "none: computed inline on the CPU kernels".to_string()
                },
            ),
            ("NBD socket", or_dash(info.nbd_socket.as_ref())),
            ("NBD TCP", or_dash(info.nbd_listen.as_ref())),
        ],
    );

    out.push_str(&format!(
        "\n{} (chosen: {}; GB/s of data chunks, one core, cache-resident)\n",
        style.bold("Parity kernels"),
        info.parity.source
    ));
    let mut kernels = Table::new(&[
        ("OPERATION", Column::Text),
        ("KERNEL", Column::Text),
        ("STREAMING", Column::Text),
        ("CANDIDATES", Column::Text),
    ]);
    for choice in &info.parity.choices {
        let speeds = if choice.speeds.is_empty() {
            "-".to_string()
        } else {
            choice
                .speeds
                .iter()
                .map(|speed| format!("{} {:.1}", speed.kernel, speed.gbps))
                .collect::<Vec<_>>()
                .join(", ")
        };
        kernels.row(vec![
            choice.operation.clone(),
            choice.kernel.clone(),
            choice.streaming_kernel.clone(),
            speeds,
        ]);
    }
    out.push_str(&kernels.render(style));

    out.push_str(&format!("\n{}\n", style.bold("Parity engines")));
    let mut engines = Table::new(&[
        ("NAME", Column::Text),
        ("KIND", Column::Text),
        ("SUBMIT", Column::Number),
        ("FROM BATCH", Column::Number),
        ("CALIBRATION (batch GB/s)", Column::Text),
        ("COMPUTED", Column::Number),
        ("ADAPTER", Column::Text),
    ]);
    for engine in &info.parity_engines {
        let calibration = if engine.calibration.is_empty() {
            "-".to_string()
        } else {
            engine
                .calibration
                .iter()
                .map(|point| format!("{} {:.1}", format_size(point.batch_bytes), point.gbps))
                .collect::<Vec<_>>()
                .join(", ")
        };
        engines.row(vec![
            engine.name.clone(),
            engine.kind.clone(),
            engine
                .submit_latency_us
                .map_or_else(|| "-".to_string(), |us| format!("{us:.0} us")),
            engine
                .min_batch_bytes
                .map_or_else(|| "never".to_string(), format_size),
            calibration,
            format!(
                "{} in {} batches",
                format_size(engine.computed_bytes),
                engine.batches
            ),
            match &engine.failure {
                Some(failure) => {
                    format!("{} (failed: {failure})", or_dash(engine.adapter.as_ref()))
                }
                None => or_dash(engine.adapter.as_ref()),
            },
        ]);
    }
    out.push_str(&engines.render(style));
    out
}
