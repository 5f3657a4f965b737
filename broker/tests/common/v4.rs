//! A minimal RocketMQ 4 remoting client on the broker's own codec (`tests/remoting.rs`,
//! `tests/hostile.rs`): one connection, requests answered in order by opaque.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use rocklet_broker::remoting::codec::{self, RemotingCommand, SerializeType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct V4 {
    pub s: TcpStream,
    pub opaque: i32,
    pub ser: SerializeType,
}

impl V4 {
    pub async fn connect(addr: SocketAddr, ser: SerializeType) -> Self {
        V4 {
            s: TcpStream::connect(addr).await.unwrap(),
            opaque: 0,
            ser,
        }
    }

    pub async fn read(&mut self) -> Option<RemotingCommand> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).await.ok()?;
        let n = codec::frame_length(len).unwrap();
        let mut buf = vec![0; n];
        self.s.read_exact(&mut buf).await.ok()?;
        Some(codec::decode_frame(&buf).unwrap())
    }

    pub async fn write(&mut self, c: &RemotingCommand) {
        self.s.write_all(&c.encode()).await.unwrap();
    }

    pub async fn call(
        &mut self,
        code: i32,
        ext: &[(&str, &str)],
        body: Vec<u8>,
    ) -> RemotingCommand {
        self.opaque += 1;
        let mut c = RemotingCommand::request(code, fields(ext), body);
        c.opaque = self.opaque;
        c.serialize = self.ser;
        self.write(&c).await;
        loop {
            let r = tokio::time::timeout(Duration::from_secs(30), self.read())
                .await
                .expect("answer in time")
                .expect("connection open");
            if r.is_response() && r.opaque == self.opaque {
                return r;
            }
        }
    }
}

pub fn fields(ext: &[(&str, &str)]) -> BTreeMap<String, String> {
    ext.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn props(p: &[(&str, &str)]) -> String {
    p.iter().map(|(k, v)| format!("{k}\u{1}{v}\u{2}")).collect()
}

/// A HEARTBEAT body of one push consumer `client` of `group` subscribed to all of `topic`.
pub fn heartbeat_body(client: &str, group: &str, topic: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "clientID": client,
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "expressionType": "TAG"}],
            "unitMode": false,
        }],
    }))
    .unwrap()
}
