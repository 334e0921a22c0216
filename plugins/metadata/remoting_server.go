package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// MessageRequestModeName is RocketMQ 5.x's config/messageRequestMode.json
// (MessageRequestModeManager): {"messageRequestModeMap":{topic:{group:{...}}}}.
const MessageRequestModeName = "messageRequestMode.json"

// TimerMetricsName is RocketMQ 5.x's config/timermetrics (TimerMetrics):
// {"dataVersion":{...},"timingCount":{topic:{"count":N,"timeStamp":MS}}}.
const TimerMetricsName = "timermetrics"

// RemotingDocument maps a RocketMQ metadata request code to the document
// that answers it.
type RemotingDocument struct {
	Code int32  // request code
	Name string // document name
	// Empty is the body served when the master has no such document (what
	// a fresh RocketMQ broker's manager encodes).
	Empty string
	// Versioned: the slave applies the document only when its DataVersion
	// differs from the local one (SlaveSynchronize's topics, subscription
	// groups and timer metrics). The others are taken every round.
	Versioned bool
	// AbsentCodes are the response codes that mean "the master has no such
	// document" rather than a failure: a 4.x master answers
	// REQUEST_CODE_NOT_SUPPORTED to the 5.x codes, a 5.x master without a
	// timer store SYSTEM_ERROR to GET_TIMER_METRICS.
	AbsentCodes []int32
}

// RemotingDocuments are the documents of SlaveSynchronize, in its order
// (syncAll): topics, consumer offsets, delay offsets, subscription groups,
// message request modes, timer metrics. The timer checkpoint (60, binary,
// copied every 3 s into a running timer store) is not served.
var RemotingDocuments = []RemotingDocument{
	{Code: remoting.GetAllTopicConfig, Name: TopicsName, Empty: DefaultDocuments[TopicsName], Versioned: true},
	{Code: remoting.GetAllConsumerOffset, Name: ConsumerOffsetName, Empty: DefaultDocuments[ConsumerOffsetName]},
	{Code: remoting.GetAllDelayOffset, Name: DelayOffsetName, Empty: DefaultDocuments[DelayOffsetName]},
	{Code: remoting.GetAllSubscriptionGroupConfig, Name: SubscriptionGroupName, Empty: DefaultDocuments[SubscriptionGroupName], Versioned: true},
	{Code: remoting.GetAllMessageRequestMode, Name: MessageRequestModeName, Empty: `{"messageRequestModeMap":{}}`,
		AbsentCodes: []int32{remoting.RequestCodeNotSupported}},
	{Code: remoting.GetTimerMetrics, Name: TimerMetricsName, Empty: `{"timingCount":{}}`, Versioned: true,
		AbsentCodes: []int32{remoting.RequestCodeNotSupported, remoting.SystemError}},
}

// RemotingCodes returns the request codes of RemotingDocuments.
func RemotingCodes() []int32 {
	out := make([]int32, len(RemotingDocuments))
	for i, d := range RemotingDocuments {
		out[i] = d.Code
	}
	return out
}

func remotingDocument(code int32) (RemotingDocument, bool) {
	for _, d := range RemotingDocuments {
		if d.Code == code {
			return d, true
		}
	}
	return RemotingDocument{}, false
}

// NewRemotingHandler returns the master's remoting handler: each code of
// RemotingDocuments is answered SUCCESS with the document as its file
// holds it, dataVersion first, which is the JSON a RocketMQ broker's
// manager encodes (TopicConfigSerializeWrapper, ConsumerOffsetManager,
// ScheduleMessageService, SubscriptionGroupManager, MessageRequestModeManager,
// TimerMetrics with fastjson). A document the store lacks is
// answered with its Empty body at the zero DataVersion. Other codes get
// REQUEST_CODE_NOT_SUPPORTED with RocketMQ's remark; a store error gets
// SYSTEM_ERROR with the error as remark.
func NewRemotingHandler(src meta.Source, log hclog.Logger) remoting.Handler {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("metadata-remoting")
	return remoting.HandlerFunc(func(ctx context.Context, req *remoting.Command) *remoting.Command {
		d, ok := remotingDocument(req.Code)
		if !ok {
			log.Debug("unsupported remoting request", "code", req.Code)
			return remoting.NewResponse(req, remoting.RequestCodeNotSupported, remoting.NotSupportedRemark(req.Code))
		}
		doc, err := src.Get(ctx, d.Name)
		switch {
		case errors.Is(err, meta.ErrNotFound):
			doc = meta.Document{Name: d.Name, Body: json.RawMessage(d.Empty)}
		case err != nil:
			log.Warn("cannot read a metadata document for a remoting request", "code", req.Code, "name", d.Name, "error", err)
			return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("replicator: %s: %v", d.Name, err))
		}
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.Body = EncodeDocument(doc.Version, doc.Body)
		return resp
	})
}
