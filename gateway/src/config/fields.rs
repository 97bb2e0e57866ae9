//! The fields a `Deserialize` type reads, found by asking it: a
//! deserializer that hands every struct all of its fields, one sample
//! value each, and writes down their dotted paths. The configuration
//! reference is checked against this list, so it cannot drift from the
//! structs that read the file.

use std::cell::RefCell;
use std::rc::Rc;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// Every field path of `T`, such as `node.feed` or `route.breaker.enabled`.
pub fn paths<T: DeserializeOwned>() -> Vec<String> {
    let found = Rc::new(RefCell::new(Vec::new()));
    let tracer = Tracer {
        path: String::new(),
        found: Rc::clone(&found),
    };
    T::deserialize(tracer).unwrap_or_else(|e| panic!("tracing the fields: {e}"));
    let mut paths = found.borrow().clone();
    paths.sort();
    paths.dedup();
    paths
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
