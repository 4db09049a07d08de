//! The names of a live response's components, shared.
//!
//! Events, receipt records and obligations name components of live responses, often many at
//! once: an epoch change withholds every route action of every live response, each with a
//! phase event, a phase record and an obligation. A component is named here by its response's
//! [`Names`] (made once at admission, one allocation) and its position, so naming one copies a
//! pointer instead of two 64-byte ids. Readmission keeps every id at its position (a candidate
//! replaces components of the response by id), so a response's names never change.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeSeq, SerializeStruct, Serializer};

use super::ids::Id;

/// A response's id and its components' ids in envelope order.
#[derive(Debug, PartialEq, Eq)]
pub struct Names {
    response: Id,
    components: Vec<Id>,
}

impl Names {
    /// The names of response `response` whose components are `components`, in envelope order.
    pub fn new<'a>(response: &Id, components: impl IntoIterator<Item = &'a Id>) -> Arc<Names> {
        Arc::new(Names {
            response: response.clone(),
            components: components.into_iter().cloned().collect(),
        })
    }

    /// The response id.
    pub fn response(&self) -> &Id {
        &self.response
    }

    /// The id of the component at `index`.
    pub fn component(&self, index: u16) -> Option<&Id> {
        self.components.get(usize::from(index))
    }

    /// Whether these names are the response `response`'s with `components` in this order.
    pub fn are<'a>(&self, response: &Id, components: impl IntoIterator<Item = &'a Id>) -> bool {
        self.response == *response && self.components.iter().eq(components)
    }

    /// How many components the response has.
    pub fn len(&self) -> usize {
        self.components.len()
    }

    /// Never true for an admitted response; present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
    }
}

/// One component of a response, by its response's shared [`Names`] and its position.
///
/// Serializes as `{"response": …, "component": …}`; events and records flatten it into their
/// own objects, so their JSON names the two ids as before.
#[derive(Clone)]
pub struct ComponentRef {
    names: Arc<Names>,
    index: u16,
}

impl ComponentRef {
    /// The component at `index` of the response `names` names; `None` past its components.
    pub fn new(names: &Arc<Names>, index: u16) -> Option<ComponentRef> {
        (usize::from(index) < names.len()).then(|| ComponentRef {
            names: Arc::clone(names),
            index,
        })
    }

    /// The response id.
    pub fn response(&self) -> &Id {
        &self.names.response
    }

    /// The component id.
    pub fn id(&self) -> &Id {
        // INVARIANT (in range): `new` made this for a position of `names`, which never change.
        self.names
            .component(self.index)
            .unwrap_or(&self.names.response)
    }

    /// The component's position in its response (envelope order).
    pub fn index(&self) -> u16 {
        self.index
    }

    /// The names of the component's response.
    pub fn names(&self) -> &Arc<Names> {
        &self.names
    }
}

impl PartialEq for ComponentRef {
    fn eq(&self, other: &ComponentRef) -> bool {
        self.index == other.index
            && (Arc::ptr_eq(&self.names, &other.names) || self.names == other.names)
    }
}

impl Eq for ComponentRef {}

impl std::fmt::Debug for ComponentRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.response(), self.id())
    }
}

impl Serialize for ComponentRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("ComponentRef", 2)?;
        st.serialize_field("response", self.response())?;
        st.serialize_field("component", self.id())?;
        st.end()
    }
}

/// A set of components of one response: an obligation's replacement scope. Lists its lead
/// (the blocked component) first, then the others in envelope order.
#[derive(Clone)]
pub struct Scope {
    names: Arc<Names>,
    lead: u16,
    /// The others, by position (a response holds at most 64 components).
    others: u64,
}

impl Scope {
    /// The component `lead` of `names` and the components in `others` (the lead's own bit,
    /// if set, is ignored).
    pub fn new(names: &Arc<Names>, lead: u16, others: u64) -> Scope {
        let own = 1u64.checked_shl(u32::from(lead)).unwrap_or(0);
        Scope {
            names: Arc::clone(names),
            lead,
            others: others & !own,
        }
    }

    /// The components' ids: the lead first, then the others in envelope order.
    pub fn iter(&self) -> impl Iterator<Item = &Id> + '_ {
        let mut m = self.others;
        std::iter::once(self.lead)
            .chain(std::iter::from_fn(move || {
                if m == 0 {
                    return None;
                }
                // At most 63: `m` is not zero.
                #[allow(clippy::cast_possible_truncation, reason = "a bit index below 64")]
                let i = m.trailing_zeros() as u16;
                m &= m - 1;
                Some(i)
            }))
            .filter_map(|i| self.names.component(i))
    }

    /// How many components the scope holds.
    pub fn len(&self) -> usize {
        1 + self.others.count_ones() as usize
    }

    /// Never true: a scope holds at least its lead.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether the component with this id is in the scope.
    pub fn contains(&self, id: &Id) -> bool {
        self.iter().any(|x| x == id)
    }
}

impl PartialEq for Scope {
    fn eq(&self, other: &Scope) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Scope {}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for id in self.iter() {
            seq.serialize_element(id)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Arc<Names> {
        let ids: Vec<Id> = ["s0", "a1", "s2", "n3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        Names::new(&"resp-1".parse().unwrap(), &ids)
    }

    #[test]
    fn a_component_ref_names_both_ids_and_serializes_as_them() {
        let n = names();
        let c = ComponentRef::new(&n, 2).unwrap();
        assert_eq!(c.response().as_str(), "resp-1");
        assert_eq!(c.id().as_str(), "s2");
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"response":"resp-1","component":"s2"}"#
        );
        // Equal by the ids they name, whether or not they share the names.
        assert_eq!(c, ComponentRef::new(&names(), 2).unwrap());
        assert_ne!(c, ComponentRef::new(&n, 1).unwrap());
        assert!(ComponentRef::new(&n, 4).is_none());
    }

    #[test]
    fn names_are_compared_by_every_id_in_order() {
        let n = names();
        let id = |s: &str| -> Id { s.parse().unwrap() };
        let same = [id("s0"), id("a1"), id("s2"), id("n3")];
        assert!(n.are(&id("resp-1"), &same));
        assert!(!n.are(&id("resp-2"), &same));
        let swapped = [id("a1"), id("s0"), id("s2"), id("n3")];
        assert!(!n.are(&id("resp-1"), &swapped));
        assert!(!n.are(&id("resp-1"), &same[..3]));
    }

    #[test]
    fn a_scope_lists_its_lead_first_then_the_others_in_order() {
        let n = names();
        let s = Scope::new(&n, 1, 0b1101);
        let ids: Vec<&str> = s.iter().map(Id::as_str).collect();
        assert_eq!(ids, ["a1", "s0", "s2", "n3"]);
        assert_eq!(s.len(), 4);
        assert!(s.contains(&"n3".parse().unwrap()));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"["a1","s0","s2","n3"]"#
        );
        let alone = Scope::new(&n, 3, 1 << 3);
        assert_eq!(alone.len(), 1);
        assert!(!alone.contains(&"s0".parse().unwrap()));
        assert_eq!(serde_json::to_string(&alone).unwrap(), r#"["n3"]"#);
    }
}
