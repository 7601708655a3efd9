//! Server-sent events, parsed incrementally from the bytes as they arrive.

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with newlines.
    pub data: String,
}

/// Turns bytes into events; lines may be split anywhere across feeds.
#[derive(Debug, Default)]
pub struct SseParser {
    pending: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line), &mut events);
        }
        events
    }

    /// The event left when the stream ended without a final blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut events = Vec::new();
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            self.line(rest.trim_end_matches('\r'), &mut events);
        }
        self.line("", &mut events);
        events.pop()
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if !self.data.is_empty() || self.event.is_some() {
                events.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => self.data.push(value.to_owned()),
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere() {
        let stream = b"event: message_start\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut parser = SseParser::new();
            let mut events = parser.feed(&stream[..split]);
            events.extend(parser.feed(&stream[split..]));
            assert_eq!(events.len(), 3, "split at {split}");
            assert_eq!(
                events[0],
                SseEvent {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                }
            );
            assert_eq!(events[1].data, "line1\nline2");
            assert_eq!(events[2].data, "[DONE]");
            assert_eq!(parser.finish(), None);
        }
        let mut parser = SseParser::new();
        assert!(parser.feed(b"data: tail").is_empty());
        assert_eq!(parser.finish().unwrap().data, "tail");
    }
}
