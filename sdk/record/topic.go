package record

import "fmt"

// MaxTopicLength is RocketMQ's TopicValidator.TOPIC_MAX_LENGTH, which also
// fits the v1 record's 1-byte topic length.
const MaxTopicLength = 127

// ValidateTopic checks RocketMQ's topic rules: 1 to MaxTopicLength bytes,
// each one of [%|a-zA-Z0-9_-]. The error wraps ErrInvalidTopic.
func ValidateTopic(topic string) error {
	if len(topic) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	}
	if len(topic) > MaxTopicLength {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidTopic, len(topic), MaxTopicLength)
	}
	for i := 0; i < len(topic); i++ {
		if !topicByte(topic[i]) {
			return fmt.Errorf("%w: byte %#x at %d is not one of [%%|a-zA-Z0-9_-]", ErrInvalidTopic, topic[i], i)
		}
	}
	return nil
}

func topicByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '%', c == '|', c == '_', c == '-':
		return true
	}
	return false
}
