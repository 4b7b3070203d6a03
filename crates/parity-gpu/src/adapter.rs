//! Finding GPU adapters and opening a device on one, with wgpu's error reporting turned from
//! panics (its default) into a latched error the engine checks after every step.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::GpuError;

/// One GPU adapter wgpu can open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdapterDescription {
    /// Its position in [`list_adapters`], which [`crate::GpuEngine::open`] takes.
    pub index: usize,
    /// The device name (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)` for Mesa's lavapipe).
    pub name: String,
    /// `vulkan`, `metal` or `dx12`.
    pub backend: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` (a software rasterizer) or `other`.
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
}

fn instance() -> wgpu::Instance {
    let descriptor = wgpu::InstanceDescriptor {
        backends: wgpu::Backends::PRIMARY,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    };
    wgpu::Instance::new(descriptor.with_env())
}

fn adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY))
}

fn describe(index: usize, adapter: &wgpu::Adapter) -> AdapterDescription {
    let info = adapter.get_info();
    let device_type = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    };
    AdapterDescription {
        index,
        name: info.name,
        backend: info.backend.to_str().to_string(),
        device_type: device_type.to_string(),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
    }
}

/// Every adapter of the primary backends (Vulkan, Metal, DX12), software ones included (Mesa's
/// lavapipe is how CI runs the GPU code). Empty when there is no GPU driver at all.
pub fn list_adapters() -> Vec<AdapterDescription> {
    adapters(&instance())
        .iter()
        .enumerate()
        .map(|(index, adapter)| describe(index, adapter))
        .collect()
}

/// The first error wgpu reported on a device (or its loss), shared with wgpu's callbacks.
#[derive(Clone, Default)]
pub(crate) struct ErrorLatch(Arc<Mutex<Option<GpuError>>>);

impl ErrorLatch {
    pub fn set(&self, error: GpuError) {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        slot.get_or_insert(error);
    }

    pub fn get(&self) -> Option<GpuError> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// An open device on one adapter.
pub(crate) struct OpenDevice {
    pub description: AdapterDescription,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub errors: ErrorLatch,
    /// The largest storage buffer binding the device accepts.
    pub max_binding_bytes: u64,
}

pub(crate) fn open(index: usize) -> Result<OpenDevice, GpuError> {
    let instance = instance();
    let mut adapters = adapters(&instance);
    let available = adapters.len();
    if index >= available {
        return Err(GpuError::NoAdapter { available });
    }
    let adapter = adapters.swap_remove(index);
    let description = describe(index, &adapter);
    // Take every limit the adapter offers: the defaults (128 MiB per storage binding) would cap
    // batches below what the hardware handles.
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("tessera parity"),
        required_features: wgpu::Features::empty(),
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|error| GpuError::RequestDevice {
        message: error.to_string(),
    })?;
    let errors = ErrorLatch::default();
    let latch = errors.clone();
    device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
        latch.set(GpuError::Device {
            message: error.to_string(),
        })
    }));
    let latch = errors.clone();
    device.set_device_lost_callback(move |reason, message| {
        latch.set(GpuError::DeviceLost {
            message: format!("{reason:?}: {message}"),
        })
    });
    let max_binding_bytes = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    Ok(OpenDevice {
        description,
        device,
        queue,
        errors,
        max_binding_bytes,
    })
}
