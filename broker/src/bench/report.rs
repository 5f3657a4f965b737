//! The report a run ends with: throughput, latency percentiles, lateness, CPU, and the
//! correctness verdict.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::*;

/// The report, and whether the run passed (no errors, correctness check passed).
#[derive(Debug)]
pub struct Report {
    pub text: String,
    pub ok: bool,
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn security(args: &BenchArgs) -> &'static str {
    match (args.credentials.is_some(), args.tls.is_some()) {
        (false, false) => "",
        (true, false) => ", signed calls (authentication on)",
        (false, true) => ", TLS",
        (true, true) => ", signed calls over TLS",
    }
}

fn describe(args: &BenchArgs) -> String {
    match &args.target {
        Target::Embedded(None) => "embedded, memory storage".into(),
        Target::Embedded(Some(_)) => format!("embedded, file storage, {:?} flush", args.flush),
        Target::InProcess => format!(
            "gRPC loopback to an in-process broker, {:?} flush{}",
            args.flush,
            security(args)
        ),
        Target::Endpoint(e) => format!("gRPC to {e}{}", security(args)),
        Target::Remoting(e) => format!("RocketMQ 4 remoting to {e}"),
    }
}

pub(super) fn report(args: &BenchArgs, o: &Outcomes) -> Report {
    let r = &o.rec;
    let secs = o.elapsed.as_secs_f64().max(1e-9);
    let rate = r.done as f64 / secs;
    let mut t = String::new();
    let what = match args.mode {
        Mode::Txn => {
            let m = args.mix;
            format!(
                "transactions (prepare + end, mix commit:rollback:unknown {}:{}:{})",
                m.commit, m.rollback, m.unknown
            )
        }
        Mode::Consume if args.fifo => format!(
            "consumed messages (receive + ack, FIFO group, {} message groups)",
            args.message_groups
        ),
        Mode::Consume => "consumed messages (receive + ack)".into(),
        m => m.noun().into(),
    };
    if args.mode == Mode::Recover {
        let _ = writeln!(
            t,
            "{} messages of {} B recovered: embedded file storage reopened in {secs:.3} s; errors {}",
            r.done, args.size, r.errors
        );
    } else {
        let _ = writeln!(
        t,
        "{} {what} of {} B, {} clients, {}: {rate:.0}/s in {secs:.2} s, latency p50 {:.3} ms, p99 {:.3} ms, p999 {:.3} ms, max {:.3} ms; errors {}",
        r.done,
        args.size,
        args.clients,
        describe(args),
        ms(&r.op, 0.5),
        ms(&r.op, 0.99),
        ms(&r.op, 0.999),
        r.op.max() as f64 / 1e3,
        r.errors,
    );
    }
    if let Some(e) = &r.first_error {
        let _ = writeln!(t, "first error: {e}");
    }
    if !r.end.is_empty() {
        let _ = writeln!(
            t,
            "END_TRANSACTION latency p50 {:.3} ms, p99 {:.3} ms, p999 {:.3} ms, max {:.3} ms ({} calls)",
            ms(&r.end, 0.5),
            ms(&r.end, 0.99),
            ms(&r.end, 0.999),
            r.end.max() as f64 / 1e3,
            r.end.len()
        );
    }
    if !r.check_late.is_empty() {
        let h = &r.check_late;
        let _ = writeln!(
            t,
            "check punctuality: {} first checks, late p50 {} ms, p99 {} ms, max {} ms past their deadline",
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
    }
    if !r.delay_late.is_empty() {
        let h = &r.delay_late;
        let _ = writeln!(
            t,
            "delay lateness: {} delayed messages consumed p50 {} ms, p99 {} ms, max {} ms after their delivery time",
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
    }
    if let Some(f) = o.fsyncs {
        let _ = writeln!(
            t,
            "{f} fsyncs ({:.3} per {}){}",
            f as f64 / r.done.max(1) as f64,
            match args.mode {
                Mode::Txn => "transaction",
                Mode::Consume => "message",
                _ => "send",
            },
            o.log_bytes.map_or(String::new(), |b| format!(
                ", {:.1} MiB logged",
                b as f64 / f64::from(1 << 20)
            ))
        );
    }
    let per_op_us = |c: &cpu::CpuTime| c.total().as_secs_f64() * 1e6 / r.done.max(1) as f64;
    if let Some(c) = &o.cpu {
        let noun = match args.mode {
            Mode::Txn => "transaction",
            _ => "message",
        };
        let _ = writeln!(
            t,
            "broker CPU {:.1} µs per {noun} ({:.2} s user + {:.2} s system over {:.2} s, {:.2} cores); bench CPU {:.1} µs per {noun}",
            per_op_us(&c.broker),
            c.broker.user.as_secs_f64(),
            c.broker.system.as_secs_f64(),
            c.wall.as_secs_f64(),
            c.broker.total().as_secs_f64() / c.wall.as_secs_f64().max(1e-9),
            per_op_us(&c.bench),
        );
    }
    for n in &o.notes {
        let _ = writeln!(t, "{n}");
    }
    let v = &o.verdict;
    let _ = writeln!(t, "correctness: {}", v.summary());
    let ok = v.ok() && r.errors == 0;
    let mut fields = vec![
        ("mode".to_string(), args.mode.name().to_string()),
        ("ok".into(), u8::from(ok).to_string()),
        ("ops".into(), r.done.to_string()),
        ("secs".into(), format!("{secs:.3}")),
        ("per_s".into(), format!("{rate:.0}")),
        ("p50_ms".into(), format!("{:.3}", ms(&r.op, 0.5))),
        ("p99_ms".into(), format!("{:.3}", ms(&r.op, 0.99))),
        ("p999_ms".into(), format!("{:.3}", ms(&r.op, 0.999))),
        ("max_ms".into(), format!("{:.3}", r.op.max() as f64 / 1e3)),
        ("errors".into(), r.errors.to_string()),
        ("consumed".into(), o.consumed.to_string()),
    ];
    if !r.end.is_empty() {
        fields.push(("end_p50_ms".into(), format!("{:.4}", ms(&r.end, 0.5))));
        fields.push(("end_p99_ms".into(), format!("{:.4}", ms(&r.end, 0.99))));
        fields.push(("end_mean_us".into(), format!("{:.2}", r.end.mean())));
    }
    if !r.check_late.is_empty() {
        fields.push(("checks".into(), r.check_late.len().to_string()));
        fields.push((
            "check_late_p99_ms".into(),
            r.check_late.value_at_quantile(0.99).to_string(),
        ));
    }
    if !r.delay_late.is_empty() {
        fields.push((
            "delay_late_p50_ms".into(),
            r.delay_late.value_at_quantile(0.5).to_string(),
        ));
        fields.push((
            "delay_late_p99_ms".into(),
            r.delay_late.value_at_quantile(0.99).to_string(),
        ));
    }
    if let Some(f) = o.fsyncs {
        fields.push(("fsyncs".into(), f.to_string()));
    }
    if args.fifo {
        fields.push(("fifo".into(), "1".into()));
        fields.push(("message_groups".into(), args.message_groups.to_string()));
        fields.push(("out_of_order".into(), o.verdict.out_of_order.to_string()));
    }
    if let Some(c) = &o.cpu {
        fields.push((
            "broker_cpu_us".into(),
            format!("{:.2}", per_op_us(&c.broker)),
        ));
        fields.push((
            "broker_user_s".into(),
            format!("{:.2}", c.broker.user.as_secs_f64()),
        ));
        fields.push((
            "broker_sys_s".into(),
            format!("{:.2}", c.broker.system.as_secs_f64()),
        ));
        fields.push(("bench_cpu_us".into(), format!("{:.2}", per_op_us(&c.bench))));
    }
    fields.extend(o.fields.iter().cloned());
    let line: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(t, "result: {}", line.join(" "));
    Report { text: t, ok }
}
