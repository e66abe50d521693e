//! Where a standalone worker serves its metrics: the address asked for, none, or the
//! device's default port.

use crate::device::DeviceSlot;

/// The port a standalone worker of GPU `N` serves its metrics on by default is this plus `N`
/// (next to the API's 10907; 9400, the first thought, is the DCGM exporter's); a CPU worker's
/// is one below it.
pub const METRICS_PORT_BASE: u16 = 10910;
/// The value of `--metrics-addr` / `CRUCIBLE_WORKER_METRICS_ADDR` that serves no metrics.
pub const METRICS_OFF: &str = "off";

/// Where a standalone worker serves its metrics ([`metrics_addr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsBind {
    /// The address to bind: the one asked for, or the device's default.
    pub addr: std::net::SocketAddr,
    /// Bound instead when `addr` is taken. Only a CPU worker's default has one, a port the
    /// kernel picks on the same host: a host may run several CPU workers, which share one
    /// default, while each GPU has a default port of its own and an address the operator set
    /// is held to (taken, the worker stops with it).
    pub if_taken: Option<std::net::SocketAddr>,
}

/// Pure: where a standalone worker on `device` serves its metrics (`--metrics-addr`, or
/// `CRUCIBLE_WORKER_METRICS_ADDR`): `value` as `host:port`, [`METRICS_OFF`] for nowhere, or
/// by default loopback at [`METRICS_PORT_BASE`] + the GPU's index, so that the GPU workers of
/// one node never pick the same port; a CPU worker's default is one below the base, and a
/// free port of the host's choosing when another CPU worker has it. `Err` says what does not
/// parse.
pub fn metrics_addr(
    value: Option<&str>,
    device: &DeviceSlot,
) -> Result<Option<MetricsBind>, String> {
    let loopback = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(METRICS_OFF) => Ok(None),
        Some(v) => v
            .parse()
            .map(|addr| {
                Some(MetricsBind {
                    addr,
                    if_taken: None,
                })
            })
            .map_err(|e| {
                format!(
                    "CRUCIBLE_WORKER_METRICS_ADDR: {v:?} is not host:port or {METRICS_OFF}: {e}"
                )
            }),
        None => match device.index() {
            Some(index) => u16::try_from(index)
                .ok()
                .and_then(|i| METRICS_PORT_BASE.checked_add(i))
                .map(|port| {
                    Some(MetricsBind {
                        addr: loopback(port),
                        if_taken: None,
                    })
                })
                .ok_or_else(|| format!("no default metrics port for GPU {index}")),
            None => Ok(Some(MetricsBind {
                addr: loopback(METRICS_PORT_BASE - 1),
                if_taken: Some(loopback(0)),
            })),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_served_on_loopback_at_a_port_per_device_unless_told() {
        let gpu = |index| DeviceSlot::Gpu {
            index,
            name: "H100".into(),
        };
        let cpu = DeviceSlot::Cpu { name: "x".into() };
        let at = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let held = |s: &str| {
            Some(MetricsBind {
                addr: at(s),
                if_taken: None,
            })
        };
        assert_eq!(metrics_addr(None, &gpu(0)), Ok(held("127.0.0.1:10910")));
        assert_eq!(metrics_addr(Some(""), &gpu(7)), Ok(held("127.0.0.1:10917")));
        // Several CPU workers of one host share the default: the second takes a free port.
        assert_eq!(
            metrics_addr(None, &cpu),
            Ok(Some(MetricsBind {
                addr: at("127.0.0.1:10909"),
                if_taken: Some(at("127.0.0.1:0")),
            }))
        );
        // An address the operator set is held to, a CPU worker's too.
        assert_eq!(
            metrics_addr(Some(" 0.0.0.0:9999 "), &gpu(1)),
            Ok(held("0.0.0.0:9999"))
        );
        assert_eq!(
            metrics_addr(Some("127.0.0.1:10909"), &cpu),
            Ok(held("127.0.0.1:10909"))
        );
        assert_eq!(metrics_addr(Some("off"), &gpu(1)), Ok(None));
        assert_eq!(metrics_addr(Some("off"), &cpu), Ok(None));
        let err = metrics_addr(Some("localhost"), &cpu).unwrap_err();
        assert!(err.contains("CRUCIBLE_WORKER_METRICS_ADDR"), "{err}");
        assert!(metrics_addr(None, &gpu(70_000)).is_err());
    }
}
