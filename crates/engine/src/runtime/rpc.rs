//! llama.cpp's RPC backend: one model's layers on other machines.
//!
//! `steward rpc-worker` exposes this machine's devices ([`run_worker`]: its
//! GPUs, or its CPU when it has none) to one client at a time;
//! `serve --rpc host:port,…` registers each worker's devices
//! ([`add_servers`]) before any model loads, and the runtime then places
//! layers on them as on local GPUs (split by the memory each reports).
//!
//! The protocol has no authentication and no encryption: whoever reaches a
//! worker's port can allocate its memory and run graphs on it. Workers bind
//! loopback unless told otherwise.
//!
//! Failure: ggml's RPC client aborts the process when a worker stops
//! answering (a closed socket, a malformed reply). [`install_abort_hook`]
//! turns that abort into a state: the message is recorded
//! ([`crate::fatal`]), every waiting request stream ends with an error
//! event, and after a short grace the process exits with status 70 so a
//! supervisor restarts it. The failing thread never returns into ggml.

use std::ffi::{c_char, CStr, CString};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use llama_cpp_sys_2 as sys;

use super::{backend, LoadError};

type AddServerFn = unsafe extern "C" fn(endpoint: *const c_char) -> sys::ggml_backend_reg_t;
type StartServerFn = unsafe extern "C" fn(
    endpoint: *const c_char,
    cache_dir: *const c_char,
    n_threads: usize,
    n_devices: usize,
    devices: *mut sys::ggml_backend_dev_t,
);

/// A function of ggml-rpc.h, looked up through the backend registry (so a
/// build with dynamic backends, where RPC is a loaded module, works too).
fn rpc_proc(name: &str) -> Result<*mut std::ffi::c_void, LoadError> {
    backend()?;
    let missing = || {
        LoadError::Backend(
            "this build has no RPC backend (llama.cpp built without GGML_RPC=ON; \
             scripts/setup.sh sets it)"
                .into(),
        )
    };
    let n = CString::new(name).map_err(|_| missing())?;
    // SAFETY: registry lookups by NUL-terminated names.
    unsafe {
        let reg = sys::ggml_backend_reg_by_name(c"RPC".as_ptr());
        if reg.is_null() {
            return Err(missing());
        }
        let f = sys::ggml_backend_reg_get_proc_address(reg, n.as_ptr());
        if f.is_null() {
            return Err(missing());
        }
        Ok(f)
    }
}

/// Exit status after a lost runtime (EX_SOFTWARE).
pub const LOST_EXIT_CODE: i32 = 70;
/// How long in-flight streams get to receive their error event.
const LOST_GRACE: Duration = Duration::from_secs(2);

/// Route ggml's aborts through [`crate::fatal`] (idempotent).
pub fn install_abort_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: the callback is a plain `extern "C"` function that never
        // returns; ggml stores the pointer in a global.
        unsafe {
            sys::ggml_set_abort_callback(Some(on_abort as unsafe extern "C" fn(*const c_char)));
        }
    });
}

extern "C" fn on_abort(message: *const c_char) {
    let msg = if message.is_null() {
        "ggml aborted".to_string()
    } else {
        // SAFETY: ggml passes a NUL-terminated buffer that lives for the call.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    // ggml prefixes `file:line: `; the reason is what follows.
    let msg = match msg.split_once(": ") {
        Some((at, rest)) if at.contains('/') && at.contains(':') => rest.trim().to_string(),
        _ => msg.trim().to_string(),
    };
    let first = crate::fatal::mark_lost(&msg);
    if first {
        tracing::error!(
            reason = %msg,
            "the model runtime aborted (a lost RPC worker, or a runtime assertion): \
             ending every request with an error, exiting in {} s",
            LOST_GRACE.as_secs()
        );
        std::thread::sleep(LOST_GRACE);
        // _exit: no atexit handlers or C++ static destructors, which would
        // race the runtime threads still blocked on the dead worker.
        // SAFETY: terminates the process.
        unsafe { libc::_exit(LOST_EXIT_CODE) };
    }
    // A second aborting thread waits for the first one's exit.
    loop {
        std::thread::park();
    }
}

/// Check `host:port` answers TCP within `timeout` (ggml aborts on a refused
/// connection; this turns that into an error naming the worker).
fn reachable(endpoint: &str, timeout: Duration) -> Result<(), String> {
    let addrs: Vec<_> = endpoint
        .to_socket_addrs()
        .map_err(|e| format!("RPC worker {endpoint}: not a host:port ({e})"))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("RPC worker {endpoint} is not reachable: {last}"))
}

/// Register each worker's devices with the runtime, before any model loads.
/// Returns the device names (`RPC0`, …) in order.
pub fn add_servers(endpoints: &[String]) -> Result<Vec<String>, LoadError> {
    backend()?;
    install_abort_hook();
    let mut names = Vec::new();
    for ep in endpoints {
        reachable(ep, Duration::from_secs(5)).map_err(LoadError::Rpc)?;
        let c = CString::new(ep.as_str())
            .map_err(|_| LoadError::Backend(format!("bad RPC endpoint {ep:?}")))?;
        // SAFETY: the registry hands out this function with this signature
        // (ggml-rpc.h); `c` outlives the call and the runtime copies it.
        let reg = unsafe {
            let add: AddServerFn = std::mem::transmute(rpc_proc("ggml_backend_rpc_add_server")?);
            add(c.as_ptr())
        };
        if reg.is_null() {
            return Err(LoadError::Rpc(format!(
                "RPC worker {ep} reports no devices"
            )));
        }
        // SAFETY: `reg` is a registry entry the RPC backend owns for the
        // process's life; registering adds its devices to ggml's list.
        unsafe {
            sys::ggml_backend_register(reg);
            for i in 0..sys::ggml_backend_reg_dev_count(reg) {
                let d = sys::ggml_backend_reg_dev_get(reg, i);
                let n = CStr::from_ptr(sys::ggml_backend_dev_name(d));
                names.push(n.to_string_lossy().into_owned());
            }
        }
    }
    Ok(names)
}

/// GPU-type devices that are not RPC workers (local accelerators).
pub fn local_gpu_count() -> Result<usize, LoadError> {
    Ok(super::gpu_devices()?
        .iter()
        .filter(|n| !n.starts_with("RPC"))
        .count())
}

/// Serve this machine's devices to one RPC client at a time; never returns
/// unless the endpoint cannot be bound or a device cannot start.
pub fn run_worker(
    endpoint: &str,
    threads: usize,
    cache_dir: Option<&str>,
) -> Result<(), LoadError> {
    backend()?;
    let mut devs: Vec<sys::ggml_backend_dev_t> = Vec::new();
    // SAFETY: the device registry is initialised by `backend()`.
    unsafe {
        for i in 0..sys::ggml_backend_dev_count() {
            let d = sys::ggml_backend_dev_get(i);
            if sys::ggml_backend_dev_type(d) == sys::GGML_BACKEND_DEVICE_TYPE_GPU {
                devs.push(d);
            }
        }
        if devs.is_empty() {
            let cpu = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
            if cpu.is_null() {
                return Err(LoadError::Backend("no CPU device".into()));
            }
            devs.push(cpu);
        }
    }
    let ep = CString::new(endpoint).map_err(|_| LoadError::Backend("bad endpoint".into()))?;
    let cache = cache_dir
        .map(CString::new)
        .transpose()
        .map_err(|_| LoadError::Backend("bad cache dir".into()))?;
    let start = rpc_proc("ggml_backend_rpc_start_server")?;
    // SAFETY: the signature is ggml-rpc.h's; the strings and the device list
    // outlive the call (it only returns on failure).
    unsafe {
        let start: StartServerFn = std::mem::transmute(start);
        start(
            ep.as_ptr(),
            cache.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            threads.max(1),
            devs.len(),
            devs.as_mut_ptr(),
        );
    }
    Err(LoadError::Rpc(format!(
        "the RPC worker could not serve on {endpoint} (port in use, or a device failed to start)"
    )))
}
