//! The device a worker evaluates on and a result was measured on: its kind, its name and its
//! class. A device class is the short name (`h100`, `a100`, `cpu`) of a kind of device whose
//! timings are comparable. A request may name one (`device_class`); a worker has exactly one, derived once,
//! here, from the device name it discovers, or set by its operator (`CRUCIBLE_DEVICE_CLASS`).
//! Tasks with a class are claimed only by workers of that class, so a speedup is always
//! measured on the kind of GPU the trainer asked for.
//!
//! A class is `[a-z0-9][a-z0-9_-]{0,31}`: it becomes part of Redis keys (no `:`), and `any`
//! is reserved for the queues of tasks without a class.

use serde::{Deserialize, Serialize};
use std::fmt;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

/// Where the timings were taken. CPU timings are labelled and never mixed with GPU timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// An NVIDIA GPU: the timings mean what a trainer wants.
    Cuda,
    /// A CPU worker (a host without a GPU, tests): correctness means what it says, timings
    /// say nothing about a GPU.
    Cpu,
}

impl DeviceKind {
    /// The name on the wire (`cuda`, `cpu`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Cuda => "cuda",
            DeviceKind::Cpu => "cpu",
        }
    }
}

/// The device a worker evaluates on, and so what a result's timings were measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeviceInfo {
    /// GPU or CPU.
    pub kind: DeviceKind,
    /// e.g. "NVIDIA H100 80GB HBM3", or the CPU model.
    pub name: String,
    /// The device's class (`h100`, `cpu`, ...): what a request's `device_class` matches.
    /// Absent in results and worker records from before classes existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<DeviceClass>,
}

/// Longest device class, in bytes.
pub const MAX_DEVICE_CLASS_BYTES: usize = 32;
/// The name no class may take: the brokers' queues of tasks without a class.
pub const UNCLASSED: &str = "any";
/// What the OpenAPI document shows `device_class` must match.
const PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,31}$";

/// A validated device class; only [`DeviceClass::parse`] (and the derivations here) make one,
/// so every class a broker builds a key from is known to be well formed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DeviceClass(String);

/// Why a string is not a device class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a device class: {1}")]
pub struct InvalidDeviceClass(String, &'static str);

impl DeviceClass {
    /// `s` as a class: 1-32 bytes of lowercase letters, digits, `_` and `-`, starting with a
    /// letter or a digit, and not [`UNCLASSED`].
    pub fn parse(s: &str) -> Result<Self, InvalidDeviceClass> {
        let refuse = |why| Err(InvalidDeviceClass(s.to_owned(), why));
        let shape =
            "use 1-32 lowercase letters, digits, '_' or '-', starting with a letter or a digit";
        let mut bytes = s.bytes();
        let Some(first) = bytes.next() else {
            return refuse(shape);
        };
        let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if s.len() > MAX_DEVICE_CLASS_BYTES
            || !plain(first)
            || !bytes.all(|b| plain(b) || b == b'_' || b == b'-')
        {
            return refuse(shape);
        }
        if s == UNCLASSED {
            return refuse("`any` is reserved: leave device_class out to run on any worker");
        }
        Ok(Self(s.to_owned()))
    }

    /// The class of CPU workers.
    pub fn cpu() -> Self {
        Self("cpu".to_owned())
    }

    /// The class of a GPU whose name says nothing of its model.
    pub fn generic_gpu() -> Self {
        Self("gpu".to_owned())
    }

    /// The class a device gets unless its operator sets one: `cpu` for a CPU, else
    /// [`DeviceClass::of_gpu_name`].
    pub fn of_device(device: &DeviceInfo) -> Self {
        match device.kind {
            DeviceKind::Cpu => Self::cpu(),
            DeviceKind::Cuda => Self::of_gpu_name(&device.name),
        }
    }

    /// The model in an NVML device name, lowercased: "NVIDIA H100 80GB HBM3" → `h100`,
    /// "NVIDIA A100-SXM4-80GB" → `a100`, "NVIDIA GeForce RTX 4090" → `rtx4090`. Brand words
    /// (NVIDIA, Tesla, GeForce, Quadro) are dropped; the model is the first word with a digit
    /// (a bare number joins the `rtx`/`gtx` before it, and a `Ti`/`Super` after it joins it).
    /// Memory size, form factor (PCIe, SXM, NVL) and generation words are not part of it: an
    /// operator who must tell such variants apart sets `CRUCIBLE_DEVICE_CLASS`. A name with no
    /// model in it (NVML unavailable: `cuda:0`) is [`DeviceClass::generic_gpu`].
    pub fn of_gpu_name(name: &str) -> Self {
        const BRANDS: [&str; 4] = ["nvidia", "tesla", "geforce", "quadro"];
        const FAMILIES: [&str; 2] = ["rtx", "gtx"];
        const SUFFIXES: [&str; 2] = ["ti", "super"];
        let lower = name.to_ascii_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty() && !BRANDS.contains(w))
            .collect();
        let has_digit = |w: &str| w.bytes().any(|b| b.is_ascii_digit());
        let model = match words.iter().position(|w| has_digit(w)) {
            // No model number at all ("TITAN V"): the words themselves.
            None => words.concat(),
            Some(i) => {
                let mut model = words[i].to_owned();
                if model.bytes().all(|b| b.is_ascii_digit()) {
                    match i.checked_sub(1).map(|p| words[p]) {
                        Some(family) if FAMILIES.contains(&family) => {
                            model.insert_str(0, family);
                        }
                        _ => return Self::generic_gpu(),
                    }
                }
                if let Some(suffix) = words.get(i + 1).filter(|w| SUFFIXES.contains(w)) {
                    model.push_str(suffix);
                }
                model
            }
        };
        let model = &model[..model.len().min(MAX_DEVICE_CLASS_BYTES)];
        Self::parse(model).unwrap_or_else(|_| Self::generic_gpu())
    }

    /// The class as requests, results and Redis keys spell it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for DeviceClass {
    type Err = InvalidDeviceClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for DeviceClass {
    type Error = InvalidDeviceClass;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<DeviceClass> for String {
    fn from(c: DeviceClass) -> Self {
        c.0
    }
}

impl PartialSchema for DeviceClass {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .pattern(Some(PATTERN))
            .description(Some(
                "A kind of device whose timings are comparable: `h100`, `a100`, `cpu`, ... \
                 (`GET /workers/status` shows each worker's `device.class`). `any` is reserved.",
            ))
            .examples(["h100"])
            .into()
    }
}

impl ToSchema for DeviceClass {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_names_give_their_model() {
        let table = [
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA H100 PCIe", "h100"),
            ("NVIDIA H100 NVL", "h100"),
            ("NVIDIA H200", "h200"),
            ("NVIDIA GH200 480GB", "gh200"),
            ("NVIDIA B200", "b200"),
            ("NVIDIA A100-SXM4-80GB", "a100"),
            ("NVIDIA A100 80GB PCIe", "a100"),
            ("NVIDIA A10G", "a10g"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA L4", "l4"),
            ("Tesla V100-SXM2-16GB", "v100"),
            ("Tesla T4", "t4"),
            ("NVIDIA RTX A6000", "a6000"),
            ("NVIDIA GeForce RTX 4090", "rtx4090"),
            ("NVIDIA GeForce RTX 3090 Ti", "rtx3090ti"),
            ("NVIDIA GeForce GTX 1080 Ti", "gtx1080ti"),
            ("NVIDIA GeForce RTX 2080 SUPER", "rtx2080super"),
            ("NVIDIA TITAN V", "titanv"),
            // What a worker calls a GPU NVML could not name.
            ("cuda:0", "gpu"),
            ("", "gpu"),
            ("NVIDIA", "gpu"),
            ("NVIDIA Ｈ100", "gpu"),
        ];
        for (name, class) in table {
            assert_eq!(DeviceClass::of_gpu_name(name).as_str(), class, "{name:?}");
        }
    }

    #[test]
    fn a_cpu_is_class_cpu_whatever_its_model() {
        let cpu = DeviceInfo {
            kind: DeviceKind::Cpu,
            name: "AMD EPYC 9654 96-Core Processor".to_owned(),
            class: None,
        };
        assert_eq!(DeviceClass::of_device(&cpu), DeviceClass::cpu());
        let gpu = DeviceInfo {
            kind: DeviceKind::Cuda,
            name: "NVIDIA H100 80GB HBM3".to_owned(),
            class: None,
        };
        assert_eq!(DeviceClass::of_device(&gpu).as_str(), "h100");
    }

    #[test]
    fn a_long_model_is_cut_to_the_limit() {
        let long = format!("NVIDIA X{}", "9".repeat(40));
        let class = DeviceClass::of_gpu_name(&long);
        assert_eq!(class.as_str().len(), MAX_DEVICE_CLASS_BYTES);
        assert!(class.as_str().starts_with("x99"));
    }

    #[test]
    fn only_well_formed_names_are_classes() {
        for ok in [
            "h100",
            "a",
            "0",
            "rtx4090ti",
            "h100-sxm",
            "my_pool",
            &"a".repeat(32),
        ] {
            assert_eq!(DeviceClass::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "H100",
            "-h100",
            "_x",
            "h100:x",
            "h 100",
            "h100/sxm",
            "é",
            &"a".repeat(33),
        ] {
            let err = DeviceClass::parse(bad).unwrap_err();
            assert!(err.to_string().contains("lowercase"), "{bad:?}: {err}");
        }
        let err = DeviceClass::parse(UNCLASSED).unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
    }

    #[test]
    fn the_wire_form_is_a_checked_string() {
        let class: DeviceClass = serde_json::from_str(r#""h100""#).unwrap();
        assert_eq!(serde_json::to_string(&class).unwrap(), r#""h100""#);
        let err = serde_json::from_str::<DeviceClass>(r#""H100""#).unwrap_err();
        assert!(err.to_string().contains("not a device class"), "{err}");
        let schema = serde_json::to_value(DeviceClass::schema()).unwrap();
        assert_eq!(schema["pattern"], PATTERN);
        // The pattern and the check agree on the edges.
        assert_eq!(PATTERN, "^[a-z0-9][a-z0-9_-]{0,31}$");
    }
}
