//! The WGSL source and the compute pipeline built from it, once per engine.

/// How the shader multiplies by a constant (recovery coefficients). Both are exact; they differ
/// in speed, which `docs/gpu.md` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MulStrategy {
    /// Eight doublings and masked XORs per product, no memory.
    #[default]
    ShiftAndAdd,
    /// 256-entry product tables in workgroup memory, one lookup per byte.
    WorkgroupTables,
}

impl MulStrategy {
    /// Both strategies, for tests and the benchmark.
    pub const ALL: [MulStrategy; 2] = [MulStrategy::ShiftAndAdd, MulStrategy::WorkgroupTables];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            MulStrategy::ShiftAndAdd => "shift",
            MulStrategy::WorkgroupTables => "table",
        }
    }
}

const PARITY_SOURCE: &str = include_str!("shaders/parity.wgsl");
const MUL_SHIFT_SOURCE: &str = include_str!("shaders/mul_shift.wgsl");
const MUL_TABLE_SOURCE: &str = include_str!("shaders/mul_table.wgsl");

/// The complete shader source for `strategy`.
pub(crate) fn source(strategy: MulStrategy) -> String {
    let multiply = match strategy {
        MulStrategy::ShiftAndAdd => MUL_SHIFT_SOURCE,
        MulStrategy::WorkgroupTables => MUL_TABLE_SOURCE,
    };
    format!("{PARITY_SOURCE}\n{multiply}")
}

/// The bind group layout and pipeline of the parity shader.
pub(crate) struct Pipeline {
    pub bind_group_layout: wgpu::BindGroupLayout,
    pub pipeline: wgpu::ComputePipeline,
}

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl Pipeline {
    pub fn new(device: &wgpu::Device, strategy: MulStrategy) -> Pipeline {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tessera parity"),
            source: wgpu::ShaderSource::Wgsl(source(strategy).into()),
        });
        let bind_group_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tessera parity"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                storage_entry(1, true),
                storage_entry(2, true),
                storage_entry(3, false),
            ],
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tessera parity"),
            bind_group_layouts: &[Some(&bind_group_layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("tessera parity"),
            layout: Some(&layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                // The tables are written in full before any read.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        Pipeline {
            bind_group_layout,
            pipeline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shader parses and validates with naga (no device needed).
    #[test]
    fn both_sources_validate() {
        for strategy in MulStrategy::ALL {
            let module = naga_check(&source(strategy));
            assert!(module, "{strategy:?}");
        }
    }

    fn naga_check(source: &str) -> bool {
        match wgpu::naga::front::wgsl::parse_str(source) {
            Ok(module) => {
                let mut validator = wgpu::naga::valid::Validator::new(
                    wgpu::naga::valid::ValidationFlags::all(),
                    wgpu::naga::valid::Capabilities::empty(),
                );
                match validator.validate(&module) {
                    Ok(_) => true,
                    Err(error) => panic!("{}", error.emit_to_string(source)),
                }
            }
            Err(error) => panic!("{}", error.emit_to_string(source)),
        }
    }
}
