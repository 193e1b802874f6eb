//! Tensor parallelism at run time: one [`ShardedFfnLayer`] per rank, each a [`DenseFfnLayer`]
//! over that rank's shard of the weights ([`HostFfn::shard`]: gate and up column-parallel, down
//! row-parallel) plus an [`AllReduce`] that sums the ranks' partial outputs in place on the
//! layer's stream. Every path of the single-GPU layer (decode, verify, km, prefill, every weight
//! format) runs per rank unchanged; the all-reduce is one more step on the same stream.
//!
//! Communicators: [`NcclAllReduce`] (NCCL through cudarc, loaded at run time; one device per
//! rank) and [`CpuAllReduce`] (ranks in threads of one process on CPU backends: the reference the
//! tests use). A rank's calls are collective: each rank calls the same method with the same
//! token count from its own thread, as engines run one thread or process per GPU.
use crate::backend::{DevicePtr, GpuBackend};
use crate::error::{Error, Result};
use crate::layer::{DenseFfnLayer, FfnActivation, ForwardContext};
use crate::load::HostFfn;
use std::sync::Arc;

mod cpu;
mod nccl;

pub use cpu::CpuAllReduce;
pub use nccl::NcclAllReduce;

/// A sum over the ranks of a group, in place.
pub trait AllReduce: Send + Sync {
    /// This rank's index, `0..world_size`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn world_size(&self) -> usize;
    /// Replaces `count` bf16 values at `buf` (on this rank's device) with their sum over all
    /// ranks, ordered after the work already queued on `stream`. Every rank gets the same sum.
    fn all_reduce_bf16(&self, buf: DevicePtr, count: usize, stream: u64) -> Result<()>;
}

/// One rank of a tensor-parallel FFN: the rank's layer (intermediate width `inter / world`)
/// and its communicator. Outputs are the full FFN's, on every rank.
pub struct ShardedFfnLayer {
    layer: DenseFfnLayer,
    comm: Box<dyn AllReduce>,
}

impl ShardedFfnLayer {
    /// Pairs a rank's layer with its communicator.
    pub fn new(layer: DenseFfnLayer, comm: Box<dyn AllReduce>) -> Result<Self> {
        if comm.rank() >= comm.world_size() {
            return Err(Error::Invalid(format!(
                "rank {} of a {}-rank group",
                comm.rank(),
                comm.world_size()
            )));
        }
        Ok(ShardedFfnLayer { layer, comm })
    }

    /// The rank's layer (its shard of the weights).
    pub fn layer(&self) -> &DenseFfnLayer {
        &self.layer
    }

    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Ranks in the group.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    fn reduce(&self, y: DevicePtr, tokens: usize, stream: u64) -> Result<DevicePtr> {
        self.comm
            .all_reduce_bf16(y, tokens * self.layer.hidden(), stream)?;
        Ok(y)
    }

    /// [`DenseFfnLayer::forward`] on the shard, then the all-reduce: bf16 `[hidden]`.
    pub fn forward(
        &self,
        input: DevicePtr,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        let y = self.layer.forward(input, ctx, stream)?;
        self.reduce(y, 1, stream)
    }

    /// [`DenseFfnLayer::forward_k2`] on the shard, then the all-reduce: bf16 `[2, hidden]`.
    pub fn forward_k2(
        &self,
        input: DevicePtr,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        let y = self.layer.forward_k2(input, ctx, stream)?;
        self.reduce(y, 2, stream)
    }

    /// [`DenseFfnLayer::forward_k3`] on the shard, then the all-reduce: bf16 `[3, hidden]`.
    pub fn forward_k3(
        &self,
        input: DevicePtr,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        let y = self.layer.forward_k3(input, ctx, stream)?;
        self.reduce(y, 3, stream)
    }

    /// [`DenseFfnLayer::forward_km`] on the shard, then the all-reduce: bf16 `[m, hidden]`.
    pub fn forward_km(
        &self,
        input: DevicePtr,
        m: usize,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        let y = self.layer.forward_km(input, m, ctx, stream)?;
        self.reduce(y, m, stream)
    }

    /// [`DenseFfnLayer::forward_prefill`] on the shard, then the all-reduce: bf16 `[n, hidden]`.
    pub fn forward_prefill(
        &self,
        input: DevicePtr,
        num_tokens: usize,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        let y = self.layer.forward_prefill(input, num_tokens, ctx, stream)?;
        self.reduce(y, num_tokens, stream)
    }
}

/// Builds every rank of a `gpus.len()`-way tensor-parallel FFN from the whole weights: shard
/// `r` goes to `gpus[r]` with `comms[r]` (the communicators of one group, in rank order).
pub fn shard_layers(
    host: &HostFfn,
    act: FfnActivation,
    gpus: &[Arc<dyn GpuBackend>],
    comms: Vec<Box<dyn AllReduce>>,
) -> Result<Vec<ShardedFfnLayer>> {
    if gpus.len() != comms.len() {
        return Err(Error::Invalid(format!(
            "{} backends for {} communicators",
            gpus.len(),
            comms.len()
        )));
    }
    let shards = host.shard(gpus.len())?;
    shards
        .iter()
        .zip(gpus)
        .zip(comms)
        .enumerate()
        .map(|(r, ((shard, gpu), comm))| {
            if comm.rank() != r || comm.world_size() != gpus.len() {
                return Err(Error::Invalid(format!(
                    "communicator {r} is rank {} of {}, expected rank {r} of {}",
                    comm.rank(),
                    comm.world_size(),
                    gpus.len()
                )));
            }
            ShardedFfnLayer::new(shard.layer(gpu, act)?, comm)
        })
        .collect()
}
