package remoting

import "fmt"

// Request codes replicator serves or sends (RequestCode.java).
const (
	GetAllTopicConfig             int32 = 21
	GetAllConsumerOffset          int32 = 43
	GetAllDelayOffset             int32 = 45
	GetTimerMetrics               int32 = 61 // 5.x
	GetAllSubscriptionGroupConfig int32 = 201
	// GetAllMessageRequestMode is 402 in RocketMQ 5.x's RequestCode
	// (345 there is QUERY_SUBSCRIPTION_BY_CONSUMER).
	GetAllMessageRequestMode int32 = 402
)

// Response codes (RemotingSysResponseCode.java; ResponseCode extends it).
const (
	Success                 int32 = 0
	SystemError             int32 = 1
	SystemBusy              int32 = 2
	RequestCodeNotSupported int32 = 3
)

// CodeName returns the RocketMQ name of a request code replicator knows,
// or "" for others.
func CodeName(code int32) string {
	switch code {
	case GetAllTopicConfig:
		return "GET_ALL_TOPIC_CONFIG"
	case GetAllConsumerOffset:
		return "GET_ALL_CONSUMER_OFFSET"
	case GetAllDelayOffset:
		return "GET_ALL_DELAY_OFFSET"
	case GetTimerMetrics:
		return "GET_TIMER_METRICS"
	case GetAllSubscriptionGroupConfig:
		return "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"
	case GetAllMessageRequestMode:
		return "GET_ALL_MESSAGE_REQUEST_MODE"
	case RegisterBroker:
		return "REGISTER_BROKER"
	case UnregisterBroker:
		return "UNREGISTER_BROKER"
	}
	return ""
}

// NotSupportedRemark is the remark of RocketMQ's REQUEST_CODE_NOT_SUPPORTED
// answer (NettyRemotingAbstract): " request type CODE not supported".
func NotSupportedRemark(code int32) string {
	return fmt.Sprintf(" request type %d not supported", code)
}

// LanguageCode is the sender's language (LanguageCode.java): a byte in
// ROCKETMQ headers, the constant's name in JSON headers.
type LanguageCode byte

// Languages.
const (
	LanguageJava   LanguageCode = 0
	LanguageCPP    LanguageCode = 1
	LanguageDotNet LanguageCode = 2
	LanguagePython LanguageCode = 3
	LanguageDelphi LanguageCode = 4
	LanguageErlang LanguageCode = 5
	LanguageRuby   LanguageCode = 6
	LanguageOther  LanguageCode = 7
	LanguageHTTP   LanguageCode = 8
	LanguageGo     LanguageCode = 9
	LanguagePHP    LanguageCode = 10
	LanguageOMS    LanguageCode = 11
	LanguageRust   LanguageCode = 12
	LanguageNodeJS LanguageCode = 13
)

var languageNames = [...]string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS"}

// String returns the Java constant's name, or LanguageCode(N).
func (l LanguageCode) String() string {
	if int(l) < len(languageNames) {
		return languageNames[l]
	}
	return fmt.Sprintf("LanguageCode(%d)", byte(l))
}

// Known reports whether l is one of the constants above.
func (l LanguageCode) Known() bool { return int(l) < len(languageNames) }

// ParseLanguage returns the language of a Java constant name.
func ParseLanguage(name string) (LanguageCode, bool) {
	for i, n := range languageNames {
		if n == name {
			return LanguageCode(i), true
		}
	}
	return 0, false
}
