//! Pinned prefixes (`--pin-budget-mb`; Anthropic `cache_control`, OpenAI
//! `prompt_cache_key`) as Prometheus rows (`/metrics`), beside the engine
//! table of `metrics`.

use std::fmt::Write;

use steward_engine::EngineStats;

/// The engine's pins: held now (entries, host bytes), made, past their
/// hold, refused for want of room.
pub fn render_pins(o: &mut String, e: &EngineStats) {
    let rows: [(&str, &str, &str, f64); 5] = [
        (
            "steward_pinned_prefixes",
            "Pinned prefixes held in host memory now",
            "gauge",
            e.pinned_entries as f64,
        ),
        (
            "steward_pinned_bytes",
            "Host bytes pinned prefixes hold (--pin-budget-mb)",
            "gauge",
            e.pinned_bytes as f64,
        ),
        (
            "steward_pins_created_total",
            "Prefixes pinned (a pin that already held the prefix is extended, not counted)",
            "counter",
            e.pins_created as f64,
        ),
        (
            "steward_pins_expired_total",
            "Pins whose hold passed (their state then left or became an ordinary cache entry)",
            "counter",
            e.pins_expired as f64,
        ),
        (
            "steward_pins_refused_total",
            "Pins not made for want of room in the pin budget",
            "counter",
            e.pins_refused as f64,
        ),
    ];
    for (name, help, kind, v) in rows {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pin_row_once_with_its_value() {
        let e = EngineStats {
            pinned_entries: 2,
            pinned_bytes: 4096,
            pins_created: 3,
            pins_expired: 1,
            ..Default::default()
        };
        let mut o = String::new();
        render_pins(&mut o, &e);
        for row in [
            "steward_pinned_prefixes 2",
            "steward_pinned_bytes 4096",
            "steward_pins_created_total 3",
            "steward_pins_expired_total 1",
            "steward_pins_refused_total 0",
            "# TYPE steward_pinned_prefixes gauge",
            "# TYPE steward_pins_expired_total counter",
        ] {
            assert_eq!(o.lines().filter(|l| *l == row).count(), 1, "{row} in\n{o}");
        }
    }
}
