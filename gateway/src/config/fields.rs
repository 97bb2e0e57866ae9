//! The fields the file may hold, found by asking the structs that read it:
//! a deserializer that hands every struct all of its fields, one sample
//! value each, and writes down their dotted paths ([`paths`]). From them,
//! [`unknown`] finds every key of a file that is no field, each with the
//! field it was probably meant to be; serde alone stops at the first. The
//! configuration reference is checked against the same list, so neither
//! can drift from the structs.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ops::Range;
use std::rc::Rc;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// Every field path of `T`, such as `node.feed` or `route.breaker.enabled`
/// (a table of an array of tables is named without an index). Empty if
/// `T` cannot be traced (a shape the tracer does not know).
pub fn paths<T: DeserializeOwned>() -> Vec<String> {
    let found = Rc::new(RefCell::new(Vec::new()));
    let tracer = Tracer {
        path: String::new(),
        found: Rc::clone(&found),
    };
    if T::deserialize(tracer).is_err() {
        return Vec::new();
    }
    let mut paths = found.borrow().clone();
    paths.sort();
    paths.dedup();
    paths
}

/// A key of the file that is no field: where it is, and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    pub span: Range<usize>,
    pub message: String,
}

/// Every key of `text` that is not among `known` (from [`paths`]), in the
/// order of the file; keys inside a map field (header names under `set`)
/// are the user's and never unknown. Nothing when `text` is not TOML: the
/// parser says why.
pub fn unknown(text: &str, known: &[String]) -> Vec<Unknown> {
    let Ok(document) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    let known: BTreeSet<&str> = known.iter().map(String::as_str).collect();
    let mut found = Vec::new();
    walk(document.get_ref(), "", &known, &mut found);
    found.sort_by_key(|u| u.span.start);
    found
}

fn walk(table: &toml::de::DeTable<'_>, at: &str, known: &BTreeSet<&str>, found: &mut Vec<Unknown>) {
    for (key, value) in table {
        let name: &str = key.get_ref();
        let path = if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}.{name}")
        };
        if !known.contains(path.as_str()) {
            let table = if at.is_empty() { "the file" } else { at };
            let mut message = format!("unknown field `{name}` in {table}");
            if let Some(close) = closest(name, at, known) {
                message.push_str(&format!(": did you mean `{close}`?"));
            }
            found.push(Unknown {
                span: key.span(),
                message,
            });
            continue;
        }
        // A field whose fields are known: a table, or an array of tables.
        let prefix = format!("{path}.");
        if !known.iter().any(|k| k.starts_with(&prefix)) {
            continue;
        }
        match value.get_ref() {
            toml::de::DeValue::Table(inner) => walk(inner, &path, known, found),
            toml::de::DeValue::Array(items) => {
                for item in items {
                    if let toml::de::DeValue::Table(inner) = item.get_ref() {
                        walk(inner, &path, known, found);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The field of table `at` nearest to `name`, when it is near enough to be
/// a slip: a typo, a missing or swapped letter, `-` for `_`.
fn closest<'k>(name: &str, at: &str, known: &BTreeSet<&'k str>) -> Option<&'k str> {
    let prefix = if at.is_empty() {
        String::new()
    } else {
        format!("{at}.")
    };
    let normalised = name.replace('-', "_").to_ascii_lowercase();
    known
        .iter()
        .copied()
        .filter_map(|path| path.strip_prefix(prefix.as_str()))
        .filter(|field| !field.contains('.'))
        .map(|field| (strsim::damerau_levenshtein(&normalised, field), field))
        .filter(|(distance, field)| *distance <= (field.len() / 4).max(1))
        .min()
        .map(|(_, field)| field)
}

#[derive(Debug)]
struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

struct Tracer {
    path: String,
    found: Rc<RefCell<Vec<String>>>,
}

impl Tracer {
    fn at(&self, field: &str) -> Tracer {
        let path = if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        };
        Tracer {
            path,
            found: Rc::clone(&self.found),
        }
    }

    fn same(&self) -> Tracer {
        Tracer {
            path: self.path.clone(),
            found: Rc::clone(&self.found),
        }
    }
}

/// toml's `Spanned<T>` reads a struct of this name: its start and end are
/// positions, its value is the field's own.
const SPANNED: &str = "$__serde_spanned_private_Spanned";

impl<'de> de::Deserializer<'de> for Tracer {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        // An untagged enum: a number is one of its shapes.
        visitor.visit_i64(1)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_bool(false)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_i64(1)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_u64(1)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str("x")
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_string("x".into())
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_seq(Once(Some(self)))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if name != SPANNED {
            let mut found = self.found.borrow_mut();
            found.extend(fields.iter().map(|f| self.at(f).path));
        }
        visitor.visit_map(Fields {
            tracer: self,
            spanned: name == SPANNED,
            fields: fields.iter(),
            current: "",
        })
    }

    /// A map (`set = { name = "value" }`) is a leaf: its keys are the
    /// user's, not fields.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(serde::de::value::MapDeserializer::<
            std::iter::Empty<(&str, &str)>,
            Error,
        >::new(std::iter::empty()))
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u32 u128 f32 f64 char bytes byte_buf unit
        unit_struct newtype_struct tuple tuple_struct enum identifier ignored_any
    }
}

struct Once(Option<Tracer>);

impl<'de> SeqAccess<'de> for Once {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0.take().map(|t| seed.deserialize(t)).transpose()
    }
}

struct Fields {
    tracer: Tracer,
    spanned: bool,
    fields: std::slice::Iter<'static, &'static str>,
    current: &'static str,
}

impl<'de> MapAccess<'de> for Fields {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(field) = self.fields.next() else {
            return Ok(None);
        };
        self.current = field;
        seed.deserialize(BorrowedStrDeserializer::<Error>::new(field))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        if self.spanned {
            if self.current.ends_with("value") {
                seed.deserialize(self.tracer.same())
            } else {
                seed.deserialize(0usize.into_deserializer())
            }
        } else {
            seed.deserialize(self.tracer.at(self.current))
        }
    }
}
