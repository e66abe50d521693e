//! A tiny end-to-end check of one GPU: driver present, context, allocation, an NVRTC-compiled
//! kernel, copies, and the arithmetic checked. It runs in its own short-lived process
//! (`<worker binary> probe-gpu`), so the worker itself never initialises CUDA.
//!
//! May import: nothing else of the crate (`scripts/check_layout.py`).

use serde::{Deserialize, Serialize};

/// What `probe-gpu` prints as its one JSON line: the worker reads it to decide whether the
/// device is healthy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Every step succeeded and the kernel's arithmetic checked.
    pub ok: bool,
    /// What was checked, or the step that failed and why.
    pub detail: String,
    /// How long the probe took, in milliseconds.
    pub elapsed_ms: f64,
}

const PROBE_KERNEL: &str = r#"
extern "C" __global__ void crucible_probe(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f + 1.0f;
}
"#;

/// Runs the probe on CUDA device `ordinal` (after CUDA_VISIBLE_DEVICES, so usually 0).
pub fn run_probe(ordinal: usize) -> ProbeReport {
    let started = std::time::Instant::now();
    let (ok, detail) = match probe(ordinal) {
        Ok(detail) => (true, detail),
        Err(e) => (false, e),
    };
    ProbeReport {
        ok,
        detail,
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
    }
}

// FFI: loading the CUDA libraries and launching the probe kernel are `unsafe` in cudarc.
#[allow(unsafe_code)]
fn probe(ordinal: usize) -> Result<String, String> {
    use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    // CudaContext::new panics instead of failing when libcuda is missing.
    // SAFETY: these only try to dlopen the libraries and report whether that worked.
    let (cuda, nvrtc) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        )
    };
    if !cuda {
        return Err("libcuda is not present".to_owned());
    }
    if !nvrtc {
        return Err("libnvrtc is not present".to_owned());
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| format!("context: {e}"))?;
    let stream = ctx.default_stream();
    let ptx = cudarc::nvrtc::compile_ptx(PROBE_KERNEL).map_err(|e| format!("nvrtc: {e}"))?;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| format!("load module: {e}"))?;
    let f = module
        .load_function("crucible_probe")
        .map_err(|e| format!("load function: {e}"))?;
    let n: i32 = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let input = stream
        .clone_htod(&host)
        .map_err(|e| format!("copy in: {e}"))?;
    let mut out = stream
        .alloc_zeros::<f32>(n as usize)
        .map_err(|e| format!("alloc: {e}"))?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&mut out).arg(&input).arg(&n);
    // SAFETY: the kernel's signature matches the three arguments pushed above, and both
    // buffers hold n floats.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }
        .map_err(|e| format!("launch: {e}"))?;
    let back = stream
        .clone_dtoh(&out)
        .map_err(|e| format!("copy out: {e}"))?;
    stream
        .synchronize()
        .map_err(|e| format!("synchronize: {e}"))?;
    let wrong = host
        .iter()
        .zip(&back)
        .filter(|(x, y)| **x * 2.0 + 1.0 != **y)
        .count();
    if wrong > 0 {
        return Err(format!("{wrong} of {n} results wrong"));
    }
    Ok(format!("kernel verified on {n} elements"))
}
