//! The simulated network: messages between nodes and clients, replication connections
//! (ordered, as TCP), link faults.

use super::*;

#[derive(Clone, Debug)]
pub(crate) enum Msg {
    /// Replication, replica → master.
    Hello {
        conn: u64,
        node: u32,
        end: u64,
        epochs: Vec<(u64, u64)>,
    },
    Welcome {
        conn: u64,
        epoch: u64,
        start: u64,
    },
    Chunk {
        conn: u64,
        epoch: u64,
        offset: u64,
        bytes: Vec<u8>,
    },
    Ack {
        conn: u64,
        end: u64,
    },
    /// The connection ended (reset, refused, closed).
    Close {
        conn: u64,
    },
    /// A client request to a node.
    Request {
        op: u64,
        request: Request,
    },
    /// A node's answer to a client (`None`: not the master).
    Reply {
        op: u64,
        reply: Option<Reply>,
    },
    /// A transaction check, master → producer.
    Check {
        node: usize,
        check: CheckRequest,
    },
    /// An etcd answer to a node.
    Etcd {
        incarnation: u64,
        purpose: Purpose,
        answer: Result<Answer, ()>,
    },
}

/// Who a message goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum To {
    Node(usize),
    Client,
}

/// A call on its way to etcd.
#[derive(Clone, Debug)]
pub(crate) struct EtcdCall {
    pub(crate) node: usize,
    pub(crate) incarnation: u64,
    pub(crate) purpose: Purpose,
    pub(crate) call: Call,
    /// When the node gives up (true time).
    pub(crate) timeout_at: Millis,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkFault {
    pub(crate) stalled_until: Millis,
    pub(crate) cut_until: Millis,
}

#[derive(Clone, Debug)]
pub(crate) struct Conn {
    pub(crate) master: usize,
    pub(crate) replica: usize,
    /// Where the master sends from next.
    pub(crate) pos: u64,
    pub(crate) epoch: u64,
    pub(crate) welcomed: bool,
    /// Last delivery time, per direction (TCP keeps order): to the master, to the replica.
    pub(crate) last: [Millis; 2],
}
