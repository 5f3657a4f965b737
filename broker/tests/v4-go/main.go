// The RocketMQ 4 Go client (github.com/apache/rocketmq-client-go/v2) against rocklet: the
// offset message id of a send result must be the one consumers see (the record's STOREHOST
// is the broker's advertised remoting address, and the send result is built from it).
//
//	go run . <namesrv host:port>
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func fail(format string, a ...any) {
	fmt.Printf("FAIL: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: v4-go-test <namesrv>")
	}
	rlog.SetLogLevel("error")
	ns := []string{os.Args[1]}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "GoStoreHost" + stamp
	group := "GoStoreHostGroup" + stamp

	p, err := rocketmq.NewProducer(producer.WithNameServer(ns), producer.WithGroupName("GoProducer"+stamp), producer.WithRetry(0))
	if err != nil {
		fail("producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail("producer start: %v", err)
	}
	defer func() { _ = p.Shutdown() }()

	const n = 3
	sent := map[string]string{} // message id (UNIQ_KEY) -> offset message id of the send result
	for i := 0; i < n; i++ {
		r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(fmt.Sprintf("body-%d", i))))
		if err != nil {
			fail("send %d: %v", i, err)
		}
		if r.Status != primitive.SendOK {
			fail("send %d: status %v", i, r.Status)
		}
		if len(r.OffsetMsgID) != 32 {
			fail("send %d: offset message id %q is not 32 hex digits", i, r.OffsetMsgID)
		}
		sent[r.MsgID] = r.OffsetMsgID
	}

	got := make(chan *primitive.MessageExt, 16)
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer(ns), consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		fail("consumer: %v", err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			got <- m
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		fail("subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		fail("consumer start: %v", err)
	}
	defer func() { _ = c.Shutdown() }()

	deadline := time.After(60 * time.Second)
	for seen := 0; seen < n; {
		select {
		case m := <-got:
			want, ok := sent[m.MsgId]
			if !ok {
				continue
			}
			if m.OffsetMsgId != want {
				fail("message %s: consumed with offset message id %s, the send result said %s", m.MsgId, m.OffsetMsgId, want)
			}
			fmt.Printf("ok: %s offsetMsgId %s (store host %s)\n", m.MsgId, m.OffsetMsgId, m.StoreHost)
			delete(sent, m.MsgId)
			seen++
		case <-deadline:
			fail("%d of %d messages consumed in 60 s", n-len(sent), n)
		}
	}
	fmt.Println("go v4 client: offset message ids agree")
}
