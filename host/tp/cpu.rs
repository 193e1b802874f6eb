//! The reference communicator: ranks in threads of one process, each on its own backend; the
//! sum is taken on the host in f32, in rank order, and rounded to bf16 once (so every rank
//! gets bit-identical results).
use super::AllReduce;
use crate::backend::{DevicePtr, GpuBackend};
use crate::error::{Error, Result};
use half::bf16;
use std::sync::{Arc, Barrier, Mutex};

struct Shared {
    barrier: Barrier,
    slots: Mutex<Vec<Option<Vec<f32>>>>,
}

/// One rank of a [`CpuAllReduce::group`]. Collective: a call returns once every rank of the
/// group has made the same call (a rank that never calls blocks the others, as with NCCL).
pub struct CpuAllReduce {
    rank: usize,
    gpu: Arc<dyn GpuBackend>,
    shared: Arc<Shared>,
}

impl CpuAllReduce {
    /// A group of `gpus.len()` ranks, rank `r` reading and writing `gpus[r]`'s memory.
    pub fn group(gpus: &[Arc<dyn GpuBackend>]) -> Result<Vec<CpuAllReduce>> {
        if gpus.is_empty() {
            return Err(Error::Invalid("a communicator group of 0 ranks".into()));
        }
        let shared = Arc::new(Shared {
            barrier: Barrier::new(gpus.len()),
            slots: Mutex::new(vec![None; gpus.len()]),
        });
        Ok(gpus
            .iter()
            .enumerate()
            .map(|(rank, gpu)| CpuAllReduce {
                rank,
                gpu: gpu.clone(),
                shared: shared.clone(),
            })
            .collect())
    }

    fn read(&self, buf: DevicePtr, count: usize, stream: u64) -> Result<Vec<f32>> {
        self.gpu.synchronize(stream)?;
        let mut bytes = vec![0u8; count * 2];
        self.gpu.download(&mut bytes, buf)?;
        Ok(bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect())
    }
}

impl AllReduce for CpuAllReduce {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn all_reduce_bf16(&self, buf: DevicePtr, count: usize, stream: u64) -> Result<()> {
        let mine = self.read(buf, count, stream);
        let lock = || self.shared.slots.lock().unwrap_or_else(|e| e.into_inner());
        lock()[self.rank] = mine.as_ref().ok().cloned();
        // Every rank takes part in both barriers, even after a local failure, so no rank is
        // left waiting; a failure anywhere is every rank's error.
        self.shared.barrier.wait();
        let sum = {
            let slots = lock();
            let mut sum = vec![0f32; count];
            let mut bad = None;
            for (r, s) in slots.iter().enumerate() {
                match s {
                    Some(v) if v.len() == count => {
                        sum.iter_mut().zip(v).for_each(|(a, b)| *a += b);
                    }
                    Some(v) => {
                        bad = Some(format!(
                            "rank {r} reduced {} values, this rank {count}",
                            v.len()
                        ))
                    }
                    None => bad = Some(format!("rank {r} could not read its buffer")),
                }
            }
            match bad {
                Some(why) => Err(Error::Invalid(format!("all-reduce: {why}"))),
                None => Ok(sum),
            }
        };
        self.shared.barrier.wait();
        mine?;
        let out: Vec<u8> = sum?
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        self.gpu.upload(buf, &out)
    }
}
