//! Delay messages: levels and delivery times are planned at send ([`super::send`]); due
//! messages are delivered here.

use super::*;

impl<S: Storage> Broker<S> {
    /// Delayed messages not yet delivered, in log order, at most `limit`.
    #[must_use]
    pub fn pending_delays(&self, limit: usize) -> Vec<PendingDelayInfo> {
        self.delays
            .iter()
            .take(limit)
            .map(|d| {
                let q = &self.queues[d.queue as usize];
                PendingDelayInfo {
                    offset: d.offset,
                    topic: self.topics[q.topic as usize].name.clone(),
                    queue_id: q.queue_id,
                    due: d.due,
                }
            })
            .collect()
    }

    pub(super) fn deliver(&mut self, row: PendingDelay) -> Res<(), S> {
        let body = itoa(row.offset);
        let mut spec = Spec::internal(
            topic::DELAY_OP,
            body.as_str().as_bytes(),
            Vec::new(),
            self.now,
        );
        spec.prepared_offset = row.offset;
        self.write(core::slice::from_ref(&spec))?;
        Ok(())
    }
}
