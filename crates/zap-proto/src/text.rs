//! [`Text`]: the string type of decoded payloads; [`Headers`] and [`Labels`]: maps kept as
//! lists in wire order.
//!
//! Request headers, metadata and metrics are many short strings. Decoded into `String`s, each
//! cost an allocation, a copy and a free, and headers in a `BTreeMap` cost a sorted insert
//! per header (a profile of decoding the 21-header request: map inserts and key compares
//! 36 %, UTF-8 checks 9 %). Measured with `benches/zentinel_codec.rs` in the `agentwire-zap`
//! crate, decoding that request from MessagePack:
//! - `String`: 2,355 ns;
//! - reference-counted slices of the frame's buffer (`bytestring`): 3,345 ns, slower: two
//!   atomic operations per string cost more than glibc's per-thread cache of small blocks;
//! - [`compact_str::CompactString`], which keeps strings of up to 24 bytes inline with no
//!   allocation: 2,083 ns; with [`Headers`] as a list, 1,318 ns
//!   (`docs/benchmarks/2026-11-26-zentinel-codec/`).
//!
//! This module owns these types and how they are written and read as maps; it must not know
//! message types or encodings.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

/// An immutable-by-convention UTF-8 string; up to 24 bytes are kept inline, without an
/// allocation. Reads as a `&str`.
///
/// ```
/// use agentwire_zap_proto::text::Text;
/// let t = Text::from("x-request-id");
/// assert_eq!(t, "x-request-id");
/// assert!(!t.is_heap_allocated());
/// ```
pub type Text = compact_str::CompactString;

/// The values of one header: one is kept inline.
pub type HeaderValues = SmallVec<[Text; 1]>;

/// Headers, name → values, in the order they were added or came on the wire. Written as a
/// map (name → array of values), as the reference crate writes its `HashMap`; a name that
/// comes twice on the wire is kept twice, and [`get`](Self::get) finds the first.
///
/// ```
/// use agentwire_zap_proto::text::Headers;
/// let mut h = Headers::new();
/// h.insert("host", ["example.com"]);
/// h.insert("accept", ["text/html", "*/*"]);
/// assert_eq!(h.get("accept").map(|v| v.len()), Some(2));
/// assert_eq!(h.get("Host"), None); // names compare exactly, as in a map
/// h.insert("host", ["example.org"]); // replaces
/// assert_eq!(h.get("host").unwrap()[0], "example.org");
/// assert_eq!(serde_json::to_string(&h).unwrap(),
///            r#"{"host":["example.org"],"accept":["text/html","*/*"]}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Headers(Vec<(Text, HeaderValues)>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Headers(Vec::new())
    }

    /// Headers of `pairs` as they are (duplicates kept), as read from the wire.
    pub(crate) fn from_pairs(pairs: Vec<(Text, HeaderValues)>) -> Self {
        Headers(pairs)
    }

    /// The values of the first header called `name`.
    pub fn get(&self, name: &str) -> Option<&[Text]> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets header `name` to `values`, replacing the first one of that name if any.
    pub fn insert<N, I>(&mut self, name: N, values: I)
    where
        N: Into<Text>,
        I: IntoIterator,
        I::Item: Into<Text>,
    {
        let name = name.into();
        let values: HeaderValues = values.into_iter().map(Into::into).collect();
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = values,
            None => self.0.push((name, values)),
        }
    }

    /// Each header's name and values, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Text, &[Text])> {
        self.0.iter().map(|(n, v)| (n, v.as_slice()))
    }

    /// Headers held (names, not values).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N, I> FromIterator<(N, I)> for Headers
where
    N: Into<Text>,
    I: IntoIterator,
    I::Item: Into<Text>,
{
    fn from_iter<T: IntoIterator<Item = (N, I)>>(iter: T) -> Self {
        let mut h = Headers::new();
        for (n, v) in iter {
            h.insert(n, v);
        }
        h
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a Text, &'a [Text]);
    type IntoIter = HeadersIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        HeadersIter(self.0.iter())
    }
}

/// Each header's name and values, in order (`for (name, values) in &headers`).
pub struct HeadersIter<'a>(std::slice::Iter<'a, (Text, HeaderValues)>);

impl<'a> Iterator for HeadersIter<'a> {
    type Item = (&'a Text, &'a [Text]);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(n, v)| (n, v.as_slice()))
    }
}

impl Serialize for Headers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_pairs(
            s,
            self.0.iter().map(|(n, v)| (n, v.as_slice())),
            self.0.len(),
        )
    }
}

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_pairs(d, "a map of header names to arrays of values").map(Headers)
    }
}

/// Metric labels, name → value, in the order added or read (written as a map, as the
/// reference's `HashMap`; two labels are kept inline).
///
/// ```
/// use agentwire_zap_proto::text::Labels;
/// let labels: Labels = [("agent", "waf"), ("rule", "sqli")].into_iter().collect();
/// assert_eq!(labels.get("rule").map(|v| v.as_str()), Some("sqli"));
/// assert_eq!(serde_json::to_string(&labels).unwrap(), r#"{"agent":"waf","rule":"sqli"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Labels(SmallVec<[(Text, Text); 2]>);

impl Labels {
    /// Labels of `pairs` as they are (duplicates kept), as read from the wire.
    pub(crate) fn from_pairs(pairs: Vec<(Text, Text)>) -> Self {
        Labels(SmallVec::from_vec(pairs))
    }

    /// The value of the first label called `name`.
    pub fn get(&self, name: &str) -> Option<&Text> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Sets label `name` to `value`, replacing the first one of that name if any.
    pub fn insert(&mut self, name: impl Into<Text>, value: impl Into<Text>) {
        let (name, value) = (name.into(), value.into());
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.0.push((name, value)),
        }
    }

    /// Each label's name and value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Text, &Text)> {
        self.0.iter().map(|(n, v)| (n, v))
    }

    /// Labels held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: Into<Text>, V: Into<Text>> FromIterator<(N, V)> for Labels {
    fn from_iter<T: IntoIterator<Item = (N, V)>>(iter: T) -> Self {
        let mut labels = Labels::default();
        for (n, v) in iter {
            labels.insert(n, v);
        }
        labels
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_pairs(s, self.iter(), self.0.len())
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_pairs(d, "a map of label names to values").map(Labels)
    }
}

/// Writes `pairs` as a map of `len` entries.
fn serialize_pairs<'a, S, V, I>(s: S, pairs: I, len: usize) -> Result<S::Ok, S::Error>
where
    S: Serializer,
    V: Serialize,
    I: Iterator<Item = (&'a Text, V)>,
{
    let mut map = s.serialize_map(Some(len))?;
    for (name, value) in pairs {
        map.serialize_entry(name, &value)?;
    }
    map.end()
}

/// Reads a map into a list of its entries in wire order (duplicates kept).
fn deserialize_pairs<'de, D, V, C>(d: D, expecting: &'static str) -> Result<C, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
    C: Default + Extend<(Text, V)>,
{
    struct PairsVisitor<V, C>(&'static str, PhantomData<(V, C)>);
    impl<'de, V: Deserialize<'de>, C: Default + Extend<(Text, V)>> Visitor<'de> for PairsVisitor<V, C> {
        type Value = C;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<C, A::Error> {
            let mut out = C::default();
            while let Some(entry) = map.next_entry::<Text, V>()? {
                out.extend(std::iter::once(entry));
            }
            Ok(out)
        }
    }
    d.deserialize_map(PairsVisitor(expecting, PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_wire_order_and_duplicates_and_read_both_encodings() {
        let json = br#"{"b":["2"],"a":["1","1b"],"b":["3"]}"#;
        let h: Headers = serde_json::from_slice(json).unwrap();
        let names: Vec<&str> = h.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["b", "a", "b"]);
        assert_eq!(h.get("b").unwrap(), ["2"]);
        assert_eq!(h.get("a").unwrap(), ["1", "1b"]);
        let packed = rmp_serde::to_vec(&h).unwrap();
        let back: Headers = rmp_serde::from_slice(&packed).unwrap();
        assert_eq!(back, h);
        assert!(serde_json::from_slice::<Headers>(br#"{"a":"not an array"}"#).is_err());
    }

    #[test]
    fn headers_read_as_the_reference_writes_them() {
        // The reference crate writes `HashMap<String, Vec<String>>`: a map in any order.
        let theirs: std::collections::HashMap<String, Vec<String>> = [
            ("x-one".to_string(), vec!["1".to_string()]),
            ("x-two".to_string(), vec![]),
        ]
        .into();
        let ours: Headers = serde_json::from_slice(&serde_json::to_vec(&theirs).unwrap()).unwrap();
        assert_eq!(ours.len(), 2);
        assert_eq!(ours.get("x-one").unwrap(), ["1"]);
        assert!(ours.get("x-two").unwrap().is_empty());
    }
}
