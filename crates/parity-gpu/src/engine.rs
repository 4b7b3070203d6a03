//! `GpuEngine`: one device and queue on one adapter, the parity pipeline compiled once, and a
//! small ring of staging slots so that batch N+1 is packed and uploaded while batch N computes.
//!
//! A batch's life in its slot:
//! 1. `submit`: the slot's upload buffer is mapped (since creation or since its last use); the
//!    header, stripe descriptors and chunks (padded to 16 bytes) are written into it, it is
//!    unmapped, and one command buffer copies it to the device buffers, dispatches the shader
//!    over every stripe, and copies the outputs to the slot's readback buffer. Right after
//!    `queue.submit`, both staging buffers are asked to map again (upload for writing, readback
//!    for reading): wgpu maps them when the GPU is done with this submission.
//! 2. `wait`: polls the device until that submission is done, copies each output out of the
//!    mapped readback buffer (cutting the padding), unmaps it, and frees the slot.
//!
//! Any wgpu error, a lost device, a failed mapping or a timeout latches the engine as failed:
//! every later call returns `GpuError::Failed`, and the dispatcher takes the work to the CPU.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::GpuError;
use crate::adapter::{self, AdapterDescription, ErrorLatch};
use crate::layout::{BatchLayout, HEADER_BYTES, MAX_WORKGROUPS_PER_AXIS};
use crate::shader::{MulStrategy, Pipeline};
use crate::stripe::{StripeOutput, StripeRef};

/// How an engine is set up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How the shader multiplies by recovery constants.
    pub strategy: MulStrategy,
    /// Batches that may be in flight at once (2: double buffering).
    pub slots: usize,
    /// How long `wait` waits for one batch before declaring the GPU failed.
    pub timeout: Duration,
    /// Workgroups along the dispatch's x axis before it goes two-dimensional (WebGPU allows at
    /// most 65,535; tests lower it to reach the two-dimensional path with small batches).
    pub dispatch_axis_limit: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            strategy: MulStrategy::default(),
            slots: 2,
            timeout: Duration::from_secs(30),
            dispatch_axis_limit: MAX_WORKGROUPS_PER_AXIS,
        }
    }
}

/// A fault a test can inject, to prove that failures reach the caller as errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next `submit` fails.
    FailNextSubmit,
    /// The next `wait` fails.
    FailNextWait,
    /// Destroy the wgpu device now, as a driver reset would lose it.
    LoseDevice,
}

/// A batch in flight: hand it back to [`GpuEngine::wait`] (once).
#[derive(Debug)]
#[must_use = "a submitted batch must be waited for to free its slot and get its outputs"]
pub struct Ticket {
    engine: u64,
    slot: usize,
    sequence: u64,
}

/// Offset of the descriptors in the upload buffer (uniform and storage bindings want 256-byte
/// aligned copies on some devices; the header comes first).
const DESCRIPTORS_OFFSET: usize = 256;
/// Smallest buffer the engine creates: wgpu rejects empty bindings, and growing in steps of
/// powers of two from here keeps reallocations rare.
const MIN_BUFFER_BYTES: u64 = 64 << 10;

/// A shared flag set by a map callback: `None` until it fires.
type MapState = Arc<Mutex<Option<bool>>>;

fn map_state() -> MapState {
    Arc::new(Mutex::new(None))
}

fn map_result(state: &MapState) -> Option<bool> {
    *state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn request_map(buffer: &wgpu::Buffer, mode: wgpu::MapMode, bytes: u64) -> MapState {
    let state = map_state();
    let callback_state = state.clone();
    buffer.map_async(mode, 0..bytes, move |result| {
        *callback_state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(result.is_ok());
    });
    state
}

/// Bytes of each buffer of a slot.
#[derive(Clone, Copy, Debug, Default)]
struct BufferSizes {
    upload: u64,
    descriptors: u64,
    input: u64,
    output: u64,
}

impl BufferSizes {
    fn holds(&self, needed: &BufferSizes) -> bool {
        self.upload >= needed.upload
            && self.descriptors >= needed.descriptors
            && self.input >= needed.input
            && self.output >= needed.output
    }

    fn largest(&self) -> u64 {
        self.upload
            .max(self.descriptors)
            .max(self.input)
            .max(self.output)
    }
}

/// The buffers of one slot, sized for the largest batch it has carried so far.
struct SlotBuffers {
    sizes: BufferSizes,
    upload: wgpu::Buffer,
    header: wgpu::Buffer,
    descriptors: wgpu::Buffer,
    input: wgpu::Buffer,
    output: wgpu::Buffer,
    readback: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
}

/// What `wait` needs to finish a batch.
struct InFlight {
    sequence: u64,
    submission: wgpu::SubmissionIndex,
    layout: BatchLayout,
    readback: Option<MapState>,
}

struct Slot {
    buffers: Option<SlotBuffers>,
    /// Whether the upload buffer is mapped for writing (`None`: a map request is pending).
    upload_mapped: Option<MapState>,
    in_flight: Option<InFlight>,
}

/// Distinguishes tickets of different engines.
static NEXT_ENGINE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Parity on one GPU adapter. See the module documentation for the life of a batch.
pub struct GpuEngine {
    id: u64,
    description: AdapterDescription,
    device: wgpu::Device,
    queue: wgpu::Queue,
    errors: ErrorLatch,
    max_binding_bytes: u64,
    pipeline: Pipeline,
    config: EngineConfig,
    slots: Vec<Slot>,
    next_sequence: u64,
    failed: Option<GpuError>,
    injected: Option<Fault>,
}

impl std::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuEngine")
            .field("adapter", &self.description)
            .field("config", &self.config)
            .field("failed", &self.failed)
            .finish()
    }
}

fn align_up(value: usize, alignment: usize) -> usize {
    value.div_ceil(alignment) * alignment
}

impl GpuEngine {
    /// Opens adapter `index` of [`crate::list_adapters`] and compiles the pipeline.
    pub fn open(index: usize, config: EngineConfig) -> Result<GpuEngine, GpuError> {
        assert!(config.slots >= 1, "at least one slot");
        let opened = adapter::open(index)?;
        let pipeline = Pipeline::new(&opened.device, config.strategy);
        let engine = GpuEngine {
            id: NEXT_ENGINE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            description: opened.description,
            device: opened.device,
            queue: opened.queue,
            errors: opened.errors,
            max_binding_bytes: opened.max_binding_bytes,
            pipeline,
            slots: (0..config.slots)
                .map(|_| Slot {
                    buffers: None,
                    upload_mapped: None,
                    in_flight: None,
                })
                .collect(),
            config,
            next_sequence: 0,
            failed: None,
            injected: None,
        };
        engine.check()?;
        Ok(engine)
    }

    /// The adapter this engine runs on.
    pub fn adapter(&self) -> &AdapterDescription {
        &self.description
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The error that disabled the engine, if any.
    pub fn failure(&self) -> Option<&GpuError> {
        self.failed.as_ref()
    }

    /// Whether a slot is free for `submit`.
    pub fn has_free_slot(&self) -> bool {
        self.slots.iter().any(|slot| slot.in_flight.is_none())
    }

    /// Batches submitted and not yet waited for.
    pub fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| slot.in_flight.is_some())
            .count()
    }

    /// The largest single buffer (input chunks of one batch) the device accepts.
    pub fn max_batch_buffer_bytes(&self) -> u64 {
        self.max_binding_bytes
    }

    /// Makes the next operation fail (or loses the device now), for tests of the fallback.
    pub fn inject_fault(&mut self, fault: Fault) {
        if fault == Fault::LoseDevice {
            self.device.destroy();
        } else {
            self.injected = Some(fault);
        }
    }

    /// Latches `error` (the first one wins) and returns it.
    fn fail(&mut self, error: GpuError) -> GpuError {
        self.failed.get_or_insert(error.clone());
        error
    }

    fn check(&self) -> Result<(), GpuError> {
        if let Some(first) = &self.failed {
            return Err(GpuError::Failed {
                first_error: first.to_string(),
            });
        }
        match self.errors.get() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Runs `check` and latches what it finds.
    fn checked(&mut self) -> Result<(), GpuError> {
        self.check().map_err(|error| self.fail(error))
    }

    /// Copies the batch to the GPU and starts it. The inputs are no longer needed when this
    /// returns; the outputs arrive in [`GpuEngine::wait`]. Panics if a stripe is malformed (a
    /// caller bug). Fails if the engine is failed, no slot is free, or the device errs.
    pub fn submit(&mut self, stripes: &[StripeRef<'_>]) -> Result<Ticket, GpuError> {
        self.checked()?;
        if self.injected == Some(Fault::FailNextSubmit) {
            self.injected = None;
            return Err(self.fail(GpuError::Injected));
        }
        let slot_index = self
            .slots
            .iter()
            .position(|slot| slot.in_flight.is_none())
            .ok_or(GpuError::NoFreeSlot)?;
        let layout = BatchLayout::new(stripes, self.config.dispatch_axis_limit);
        let input_start = align_up(DESCRIPTORS_OFFSET + layout.descriptors.len() * 4, 256);
        let needed = BufferSizes {
            upload: (input_start + layout.input_bytes) as u64,
            descriptors: (layout.descriptors.len() * 4) as u64,
            input: layout.input_bytes as u64,
            output: layout.output_bytes as u64,
        };
        if needed.largest() > self.max_binding_bytes {
            return Err(GpuError::BatchTooLarge {
                needed_bytes: needed.largest(),
                limit_bytes: self.max_binding_bytes,
            });
        }
        self.ensure_capacity(slot_index, needed)?;
        self.pack(slot_index, stripes, &layout, input_start)?;

        let slot = &self.slots[slot_index];
        let buffers = slot.buffers.as_ref().expect("ensured");
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tessera parity batch"),
            });
        encoder.copy_buffer_to_buffer(&buffers.upload, 0, &buffers.header, 0, HEADER_BYTES as u64);
        let descriptor_bytes = (layout.descriptors.len() * 4) as u64;
        if descriptor_bytes > 0 {
            encoder.copy_buffer_to_buffer(
                &buffers.upload,
                DESCRIPTORS_OFFSET as u64,
                &buffers.descriptors,
                0,
                descriptor_bytes,
            );
        }
        if layout.input_bytes > 0 {
            encoder.copy_buffer_to_buffer(
                &buffers.upload,
                input_start as u64,
                &buffers.input,
                0,
                layout.input_bytes as u64,
            );
        }
        if layout.total_workgroups > 0 {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("tessera parity"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.pipeline.pipeline);
            pass.set_bind_group(0, &buffers.bind_group, &[]);
            pass.dispatch_workgroups(layout.dispatch.0, layout.dispatch.1, 1);
        }
        if layout.output_bytes > 0 {
            encoder.copy_buffer_to_buffer(
                &buffers.output,
                0,
                &buffers.readback,
                0,
                layout.output_bytes as u64,
            );
        }
        let submission = self.queue.submit([encoder.finish()]);
        let upload_mapped =
            request_map(&buffers.upload, wgpu::MapMode::Write, buffers.upload.size());
        let readback = (layout.output_bytes > 0).then(|| {
            request_map(
                &buffers.readback,
                wgpu::MapMode::Read,
                layout.output_bytes as u64,
            )
        });
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let slot = &mut self.slots[slot_index];
        slot.upload_mapped = Some(upload_mapped);
        slot.in_flight = Some(InFlight {
            sequence,
            submission,
            layout,
            readback,
        });
        self.checked()?;
        Ok(Ticket {
            engine: self.id,
            slot: slot_index,
            sequence,
        })
    }

    /// Waits for `ticket`'s batch and copies its outputs into `outputs` (one per stripe, in
    /// submission order, shaped as `StripeOutput::check` requires). The slot is free afterwards,
    /// whatever the result.
    pub fn wait(
        &mut self,
        ticket: Ticket,
        outputs: &mut [StripeOutput<'_>],
    ) -> Result<(), GpuError> {
        if ticket.engine != self.id {
            return Err(GpuError::UnknownTicket);
        }
        let in_flight =
            match self
                .slots
                .get_mut(ticket.slot)
                .and_then(|slot| match &slot.in_flight {
                    Some(in_flight) if in_flight.sequence == ticket.sequence => {
                        slot.in_flight.take()
                    }
                    _ => None,
                }) {
                Some(in_flight) => in_flight,
                None => return Err(GpuError::UnknownTicket),
            };
        assert_eq!(
            outputs.len(),
            in_flight.layout.stripes.len(),
            "one output per stripe"
        );
        self.checked()?;
        if self.injected == Some(Fault::FailNextWait) {
            self.injected = None;
            return Err(self.fail(GpuError::Injected));
        }
        let polled = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(in_flight.submission.clone()),
            timeout: Some(self.config.timeout),
        });
        if polled.is_err() {
            return Err(self.fail(GpuError::Timeout));
        }
        self.checked()?;
        let Some(readback) = &in_flight.readback else {
            // Nothing to read: every stripe had zero-length chunks.
            return Ok(());
        };
        if map_result(readback) != Some(true) {
            return Err(self.fail(GpuError::Map));
        }
        let buffers = self.slots[ticket.slot].buffers.as_ref().expect("in use");
        {
            let output_bytes = in_flight.layout.output_bytes as u64;
            let view = buffers
                .readback
                .get_mapped_range(0..output_bytes)
                .map_err(|_| GpuError::Map);
            let view = match view {
                Ok(view) => view,
                Err(error) => return Err(self.fail(error)),
            };
            for (stripe, output) in in_flight.layout.stripes.iter().zip(outputs.iter_mut()) {
                let first = stripe.output_offset_bytes;
                assert_eq!(output.first.len(), stripe.chunk_bytes, "output length");
                output
                    .first
                    .copy_from_slice(&view[first..first + stripe.chunk_bytes]);
                if let Some(second) = output.second.as_deref_mut() {
                    assert_eq!(second.len(), stripe.chunk_bytes, "output length");
                    let start = first + stripe.padded_bytes;
                    second.copy_from_slice(&view[start..start + stripe.chunk_bytes]);
                }
            }
        }
        buffers.readback.unmap();
        self.checked()
    }

    /// `submit` then `wait`: one batch, synchronously.
    pub fn run(
        &mut self,
        stripes: &[StripeRef<'_>],
        outputs: &mut [StripeOutput<'_>],
    ) -> Result<(), GpuError> {
        for (stripe, output) in stripes.iter().zip(outputs.iter()) {
            output.check(stripe);
        }
        let ticket = self.submit(stripes)?;
        self.wait(ticket, outputs)
    }

    /// The round trip of an empty submission: submit, then block until the GPU reports it done.
    /// The median of `rounds` tries.
    pub fn submit_latency(&mut self, rounds: usize) -> Result<Duration, GpuError> {
        self.checked()?;
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds.max(1) {
            let started = Instant::now();
            let encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            let submission = self.queue.submit([encoder.finish()]);
            if self
                .device
                .poll(wgpu::PollType::Wait {
                    submission_index: Some(submission),
                    timeout: Some(self.config.timeout),
                })
                .is_err()
            {
                return Err(self.fail(GpuError::Timeout));
            }
            times.push(started.elapsed());
        }
        self.checked()?;
        times.sort();
        Ok(times[times.len() / 2])
    }

    /// Grows the slot's buffers (when idle) to hold `needed`, and makes sure its upload buffer
    /// is mapped.
    fn ensure_capacity(&mut self, slot_index: usize, needed: BufferSizes) -> Result<(), GpuError> {
        let current = self.slots[slot_index]
            .buffers
            .as_ref()
            .map_or(BufferSizes::default(), |buffers| buffers.sizes);
        if !current.holds(&needed) {
            let grow = |needed: u64, current: u64| {
                needed
                    .max(current)
                    .max(MIN_BUFFER_BYTES)
                    .next_power_of_two()
                    .min(self.max_binding_bytes.max(needed))
            };
            let sizes = BufferSizes {
                upload: grow(needed.upload, current.upload),
                descriptors: grow(needed.descriptors, current.descriptors),
                input: grow(needed.input, current.input),
                output: grow(needed.output, current.output),
            };
            let buffers = self.create_buffers(sizes);
            let slot = &mut self.slots[slot_index];
            if let Some(old) = slot.buffers.replace(buffers) {
                old.upload.destroy();
                old.descriptors.destroy();
                old.input.destroy();
                old.output.destroy();
                old.readback.destroy();
            }
            // Created mapped.
            let mapped = map_state();
            *mapped
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(true);
            slot.upload_mapped = Some(mapped);
            self.checked()?;
        }
        let slot = &self.slots[slot_index];
        match slot.upload_mapped.as_ref().and_then(map_result) {
            Some(true) => Ok(()),
            // The slot was waited for, so its map request has completed: anything else is a
            // failed mapping.
            _ => Err(self.fail(GpuError::Map)),
        }
    }

    fn create_buffers(&self, sizes: BufferSizes) -> SlotBuffers {
        let buffer = |label: &str, size: u64, usage: wgpu::BufferUsages, mapped: bool| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: mapped,
            })
        };
        use wgpu::BufferUsages as Usage;
        let upload = buffer(
            "upload",
            sizes.upload,
            Usage::MAP_WRITE | Usage::COPY_SRC,
            true,
        );
        let header = buffer("header", 256, Usage::UNIFORM | Usage::COPY_DST, false);
        let descriptors = buffer(
            "descriptors",
            sizes.descriptors,
            Usage::STORAGE | Usage::COPY_DST,
            false,
        );
        let input = buffer(
            "input",
            sizes.input,
            Usage::STORAGE | Usage::COPY_DST,
            false,
        );
        let output = buffer(
            "output",
            sizes.output,
            Usage::STORAGE | Usage::COPY_SRC,
            false,
        );
        let readback = buffer(
            "readback",
            sizes.output,
            Usage::MAP_READ | Usage::COPY_DST,
            false,
        );
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tessera parity"),
            layout: &self.pipeline.bind_group_layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: header.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: descriptors.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: input.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: output.as_entire_binding(),
                },
            ],
        });
        SlotBuffers {
            sizes,
            upload,
            header,
            descriptors,
            input,
            output,
            readback,
            bind_group,
        }
    }

    /// Writes the header, descriptors and padded chunks into the slot's mapped upload buffer,
    /// then unmaps it.
    fn pack(
        &mut self,
        slot_index: usize,
        stripes: &[StripeRef<'_>],
        layout: &BatchLayout,
        input_start: usize,
    ) -> Result<(), GpuError> {
        let buffers = self.slots[slot_index].buffers.as_ref().expect("ensured");
        let total = (input_start + layout.input_bytes) as u64;
        let mut view = match buffers.upload.get_mapped_range_mut(0..total) {
            Ok(view) => view,
            Err(_) => return Err(self.fail(GpuError::Map)),
        };
        let header: Vec<u8> = layout.header.iter().flat_map(|w| w.to_le_bytes()).collect();
        view.slice(..HEADER_BYTES).copy_from_slice(&header);
        let descriptors: Vec<u8> = layout
            .descriptors
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        view.slice(DESCRIPTORS_OFFSET..DESCRIPTORS_OFFSET + descriptors.len())
            .copy_from_slice(&descriptors);
        for (stripe, place) in stripes.iter().zip(&layout.stripes) {
            let lost = stripe.operation.lost();
            let chunks = stripe
                .data
                .iter()
                .enumerate()
                .filter(|(i, _)| !lost.contains(i))
                .map(|(_, chunk)| *chunk)
                .chain(stripe.parity.iter().copied());
            let mut offset = input_start + place.input_offset_bytes;
            for chunk in chunks {
                view.slice(offset..offset + chunk.len())
                    .copy_from_slice(chunk);
                view.slice(offset + chunk.len()..offset + place.padded_bytes)
                    .fill(0);
                offset += place.padded_bytes;
            }
        }
        drop(view);
        buffers.upload.unmap();
        self.slots[slot_index].upload_mapped = None;
        Ok(())
    }
}
