//! An at-least-once queue with a visibility timeout, as a pure state
//! machine written once for both worlds: the simulator's queue host calls
//! it synchronously with its simulated time, and the real world's queues
//! (pgmq, SQS, River) are tested against what it says. It does no I/O and
//! reads no clock: time comes in as `now_ms`.
//!
//! A delivered message is invisible for the visibility timeout its
//! delivery asked for. Acked within it, it is gone; not acked, it becomes
//! visible again and is delivered anew, with its delivery count one up and
//! `redelivered` set. A consumer that stalls past the timeout therefore
//! sees its message handed to another consumer while it still works on
//! it: the queue delivers at least once, never exactly once, and the
//! effects of a job must be deduplicated downstream.
//!
//! Messages are delivered oldest first: by the time each last became
//! visible (its enqueue, or the end of its last delivery's timeout), then
//! by id. A released message (a nack, or its consumer's channel closed) is
//! visible at once, at the place it had when it was delivered, as RabbitMQ
//! requeues a message at its original position.

use std::collections::BTreeMap;

/// Which real queue a payments run takes its jobs from. The simulator's
/// queue is [`Queue`] itself, whichever is named: both real queues are
/// held to what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum QueueKind {
    /// A PostgreSQL table taken with `FOR UPDATE SKIP LOCKED`, each job
    /// hidden for its visibility timeout when taken (as River, pgmq and
    /// Oban do).
    #[default]
    Postgres,
    /// A RabbitMQ queue: a job not acknowledged in time is requeued when
    /// its consumer's channel closes.
    Rabbitmq,
}

impl QueueKind {
    pub const ALL: [QueueKind; 2] = [QueueKind::Postgres, QueueKind::Rabbitmq];

    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Postgres => "postgres",
            QueueKind::Rabbitmq => "rabbitmq",
        }
    }

    pub fn parse(name: &str) -> Option<QueueKind> {
        QueueKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// One delivery of a message to a consumer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Delivery {
    /// The message's id, from 1 in enqueue order.
    pub message: u64,
    pub data: String,
    /// Which delivery of the message this is, from 1.
    pub delivery: u32,
    /// Whether the message was delivered before (`delivery > 1`).
    pub redelivered: bool,
}

/// How an ack ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The message is deleted; it will not be delivered again.
    Acked,
    /// No such message: already acked, or never enqueued.
    Gone,
}

/// A message not yet acked.
#[derive(Debug, Clone)]
struct Message {
    data: String,
    /// When it last became visible, as the delivery order counts it.
    since_ms: u64,
    /// Until when its last delivery hides it; `None` when it is not
    /// delivered (or was released).
    hidden_until_ms: Option<u64>,
    /// How many times it was delivered.
    deliveries: u32,
}

impl Message {
    fn visible(&self, now_ms: u64) -> bool {
        self.hidden_until_ms.is_none_or(|until| until <= now_ms)
    }

    /// When it last became visible: its delivery's timeout ran out at
    /// `hidden_until_ms` if that is past.
    fn visible_since(&self, now_ms: u64) -> u64 {
        match self.hidden_until_ms {
            Some(until) if until <= now_ms => until,
            _ => self.since_ms,
        }
    }
}

/// The queue: its messages not yet acked, by id.
///
/// Time, as the queue sees it, never goes back: a call's `now_ms` earlier
/// than one already given is taken as the latest given, so that a caller's
/// clock going back cannot hide a message again. The counts
/// ([`Queue::pending`], [`Queue::in_flight`]) are as of that latest time.
#[derive(Debug, Clone, Default)]
pub struct Queue {
    messages: BTreeMap<u64, Message>,
    /// The last id given out.
    last_id: u64,
    /// The latest `now_ms` any call gave.
    clock_ms: u64,
}

impl Queue {
    pub fn new() -> Queue {
        Queue::default()
    }

    /// The call's time, never before the latest time already given.
    fn tick(&mut self, now_ms: u64) -> u64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        self.clock_ms
    }

    /// Adds `data` as a new message, visible at once, and returns its id
    /// (from 1, in enqueue order).
    pub fn enqueue(&mut self, data: String, now_ms: u64) -> u64 {
        let now_ms = self.tick(now_ms);
        self.last_id += 1;
        let message = Message { data, since_ms: now_ms, hidden_until_ms: None, deliveries: 0 };
        self.messages.insert(self.last_id, message);
        self.last_id
    }

    /// Delivers the oldest visible message and hides it for
    /// `visibility_ms`; `None` when no message is visible (every one is
    /// acked, or hidden by a delivery whose timeout has not run out).
    pub fn deliver(&mut self, now_ms: u64, visibility_ms: u64) -> Option<Delivery> {
        let now_ms = self.tick(now_ms);
        let (&id, _) = self
            .messages
            .iter()
            .filter(|(_, message)| message.visible(now_ms))
            .min_by_key(|(&id, message)| (message.visible_since(now_ms), id))?;
        let message = self.messages.get_mut(&id)?;
        message.since_ms = message.visible_since(now_ms);
        message.hidden_until_ms = Some(now_ms.saturating_add(visibility_ms));
        message.deliveries = message.deliveries.saturating_add(1);
        Some(Delivery {
            message: id,
            data: message.data.clone(),
            delivery: message.deliveries,
            redelivered: message.deliveries > 1,
        })
    }

    /// Deletes the message. Any delivery's ack deletes it, even a stale
    /// one whose timeout ran out and whose message was delivered again
    /// since, as pgmq's delete by message id does: the queue does not know
    /// which consumer acks. The consumer holding the newer delivery then
    /// finds it `Gone` when it acks in turn.
    pub fn ack(&mut self, message: u64, now_ms: u64) -> Ack {
        self.tick(now_ms);
        match self.messages.remove(&message) {
            Some(_) => Ack::Acked,
            None => Ack::Gone,
        }
    }

    /// Makes a delivered message visible at once (a nack, or its
    /// consumer's channel closed), at the place it had when it was
    /// delivered; its delivery count stays, so its next delivery is a
    /// redelivery. Whether the message was hidden by a delivery: releasing
    /// a visible, acked or unknown message does nothing.
    pub fn release(&mut self, message: u64) -> bool {
        let clock_ms = self.clock_ms;
        match self.messages.get_mut(&message) {
            Some(message) if !message.visible(clock_ms) => {
                message.hidden_until_ms = None;
                true
            }
            _ => false,
        }
    }

    /// How many messages are waiting to be delivered: not acked, and
    /// visible at the latest time given.
    pub fn pending(&self) -> usize {
        self.messages.values().filter(|message| message.visible(self.clock_ms)).count()
    }

    /// How many messages are delivered and hidden at the latest time
    /// given: neither acked nor visible again yet.
    pub fn in_flight(&self) -> usize {
        self.messages.len() - self.pending()
    }

    /// Whether every message enqueued was acked.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(data: &[&str]) -> Queue {
        let mut queue = Queue::new();
        for (at, data) in data.iter().enumerate() {
            queue.enqueue(data.to_string(), at as u64);
        }
        queue
    }

    fn delivery(message: u64, data: &str, delivery: u32) -> Option<Delivery> {
        Some(Delivery { message, data: data.into(), delivery, redelivered: delivery > 1 })
    }

    #[test]
    fn messages_are_delivered_in_enqueue_order_with_ids_from_one() {
        let mut queue = queue(&["a", "b", "c"]);
        assert_eq!(queue.deliver(10, 1_000), delivery(1, "a", 1));
        assert_eq!(queue.deliver(10, 1_000), delivery(2, "b", 1));
        assert_eq!(queue.deliver(10, 1_000), delivery(3, "c", 1));
        assert_eq!(queue.deliver(10, 1_000), None);
        assert_eq!((queue.pending(), queue.in_flight()), (0, 3));
        assert!(!queue.is_empty());
    }

    #[test]
    fn a_message_enqueued_at_the_same_time_goes_by_id() {
        let mut queue = Queue::new();
        assert_eq!(queue.enqueue("a".into(), 5), 1);
        assert_eq!(queue.enqueue("b".into(), 5), 2);
        assert_eq!(queue.deliver(5, 100), delivery(1, "a", 1));
    }

    #[test]
    fn an_unacked_message_is_redelivered_when_its_timeout_runs_out() {
        let mut queue = queue(&["a"]);
        assert_eq!(queue.deliver(0, 3_000), delivery(1, "a", 1));
        // Hidden until 3000, exactly.
        assert_eq!(queue.deliver(2_999, 3_000), None);
        assert_eq!((queue.pending(), queue.in_flight()), (0, 1));
        assert_eq!(queue.deliver(3_000, 3_000), delivery(1, "a", 2));
        assert_eq!(queue.deliver(6_000, 3_000), delivery(1, "a", 3));
        assert_eq!(queue.deliver(6_000, 3_000), None);
    }

    #[test]
    fn a_redelivery_takes_its_place_by_when_its_timeout_ran_out() {
        let mut queue = Queue::new();
        queue.enqueue("a".into(), 0);
        assert_eq!(queue.deliver(0, 3_000), delivery(1, "a", 1));
        queue.enqueue("b".into(), 2_000);
        queue.enqueue("c".into(), 4_000);
        // "a" became visible again at 3000: after "b", before "c".
        assert_eq!(queue.deliver(5_000, 10_000), delivery(2, "b", 1));
        assert_eq!(queue.deliver(5_000, 10_000), delivery(1, "a", 2));
        assert_eq!(queue.deliver(5_000, 10_000), delivery(3, "c", 1));
    }

    #[test]
    fn a_stale_delivery_still_acks_and_the_newer_one_finds_it_gone() {
        let mut queue = queue(&["a"]);
        assert_eq!(queue.deliver(0, 1_000), delivery(1, "a", 1));
        assert_eq!(queue.deliver(1_500, 1_000), delivery(1, "a", 2));
        // The first consumer, stalled past its timeout, acks.
        assert_eq!(queue.ack(1, 1_600), Ack::Acked);
        assert_eq!(queue.ack(1, 1_700), Ack::Gone);
        assert!(queue.is_empty());
        assert_eq!(queue.deliver(5_000, 1_000), None);
    }

    #[test]
    fn an_acked_message_is_not_delivered_again() {
        let mut queue = queue(&["a", "b"]);
        assert_eq!(queue.deliver(10, 1_000), delivery(1, "a", 1));
        assert_eq!(queue.ack(1, 20), Ack::Acked);
        assert_eq!((queue.pending(), queue.in_flight()), (1, 0));
        assert_eq!(queue.deliver(5_000, 1_000), delivery(2, "b", 1));
        assert_eq!(queue.deliver(10_000, 1_000), delivery(2, "b", 2));
    }

    #[test]
    fn an_unknown_message_is_gone() {
        let mut queue = queue(&["a"]);
        assert_eq!(queue.ack(2, 0), Ack::Gone);
        assert_eq!(queue.ack(0, 0), Ack::Gone);
        // A visible message, never delivered, acks too.
        assert_eq!(queue.ack(1, 0), Ack::Acked);
    }

    #[test]
    fn a_released_message_is_visible_at_once_in_its_old_place() {
        let mut queue = queue(&["a", "b"]);
        assert_eq!(queue.deliver(10, 60_000), delivery(1, "a", 1));
        assert!(queue.release(1));
        assert_eq!((queue.pending(), queue.in_flight()), (2, 0));
        // Ahead of "b" again, and a redelivery.
        assert_eq!(queue.deliver(20, 60_000), delivery(1, "a", 2));
        // Releasing what is visible, acked or unknown does nothing.
        assert!(!queue.release(2));
        assert_eq!(queue.ack(1, 30), Ack::Acked);
        assert!(!queue.release(1));
        assert!(!queue.release(9));
        assert_eq!(queue.deliver(40, 60_000), delivery(2, "b", 1));
    }

    #[test]
    fn time_given_out_of_order_does_not_hide_a_message_again() {
        let mut queue = queue(&["a"]);
        assert_eq!(queue.deliver(0, 1_000), delivery(1, "a", 1));
        assert_eq!(queue.deliver(1_000, 1_000), delivery(1, "a", 2));
        // An earlier time is the latest given (1000): hidden until 2000.
        assert_eq!(queue.deliver(500, 1_000), None);
        assert_eq!(queue.deliver(2_000, 1_000), delivery(1, "a", 3));
    }

    #[test]
    fn an_empty_queue_delivers_nothing() {
        let mut queue = Queue::new();
        assert!(queue.is_empty());
        assert_eq!(queue.deliver(0, 1_000), None);
        assert_eq!((queue.pending(), queue.in_flight()), (0, 0));
    }
}
