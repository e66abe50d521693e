//! Pure helpers of the Redis broker, checked without a server.

use super::*;

#[test]
fn polling_backs_off_to_a_cap() {
    let mut p = None;
    let seen: Vec<u64> = (0..6)
        .map(|_| {
            let d = next_poll(p);
            p = Some(d);
            d.as_millis() as u64
        })
        .collect();
    assert_eq!(seen, [20, 40, 80, 160, 200, 200]);
}

#[test]
fn timestamps_parse_from_integer_and_double_scores() {
    let a = time_from_ms("1712345678901").unwrap();
    let b = time_from_ms("1.712345678901e12").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.timestamp_millis(), 1_712_345_678_901);
    assert!(time_from_ms("soon").is_err());
}

#[test]
fn claim_cycle_is_spelled_for_the_script() {
    let broker = RedisBroker::connect("redis://127.0.0.1:1", BrokerConfig::default()).unwrap();
    assert_eq!(broker.claim_cycle, "hnhlhnh");
}
