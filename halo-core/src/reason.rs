//! Stable reason codes.
//!
//! Every rejection, withholding, denial, obligation and receipt carries exactly one code from
//! this table. The numeric value and the name are part of the wire and receipt formats: never
//! renumber or rename a code, only add new ones. Receipts store the code, not the text.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! reasons {
    ($($name:ident($num:literal) $desc:literal;)+) => {
        /// A stable reason code. See the module documentation.
        #[allow(non_camel_case_types, reason = "codes are spelled as they appear on the wire")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u16)]
        pub enum ReasonCode {
            $(
                #[doc = $desc]
                $name = $num,
            )+
        }

        impl ReasonCode {
            /// Every code, in numeric order.
            pub const ALL: &'static [ReasonCode] = &[$(ReasonCode::$name,)+];

            /// The stable upper-case name, e.g. `STALE_SOURCE`.
            pub const fn name(self) -> &'static str {
                match self { $(ReasonCode::$name => stringify!($name),)+ }
            }

            /// A one-line description for people.
            pub const fn description(self) -> &'static str {
                match self { $(ReasonCode::$name => $desc,)+ }
            }

            /// The stable number.
            pub const fn number(self) -> u16 {
                self as u16
            }

            /// Looks a code up by its name.
            pub fn from_name(name: &str) -> Option<ReasonCode> {
                match name { $(stringify!($name) => Some(ReasonCode::$name),)+ _ => None }
            }
        }
    };
}

reasons! {
    // --- response envelope and structural validation: the whole response is rejected ---
    RESPONSE_TOO_LARGE(100) "the response exceeds the byte limit";
    MALFORMED_JSON(101) "the response is not well-formed JSON of the expected shape";
    UNKNOWN_FIELD(102) "the response carries a field the format does not define";
    DUPLICATE_KEY(103) "a JSON object repeats a key";
    UNSUPPORTED_FORMAT(104) "the response declares a format version this gateway does not speak";
    TOO_MANY_COMPONENTS(105) "the response has more components than allowed";
    TOO_MANY_PREREQUISITES(106) "a component declares more prerequisites than allowed";
    PAYLOAD_TOO_LARGE(107) "a component payload exceeds the byte limit";
    INVALID_ID(108) "an identifier is empty, too long or uses characters outside [A-Za-z0-9._-]";
    CATALOG_MISMATCH(109) "the response names a catalog id or version other than the loaded one";
    DUPLICATE_ID(110) "two components share an id";
    UNKNOWN_TYPE(111) "a component type is not in the catalog";
    MISSING_REFERENCE(112) "a prerequisite names a component that is not in the response";
    SELF_REFERENCE(113) "a component names itself as a prerequisite";
    CYCLE(114) "the prerequisites form a cycle";
    PHASE_NOT_ALLOWED(115) "the catalog does not allow this prerequisite type and phase";
    DUPLICATE_PREREQUISITE(116) "a component names the same prerequisite twice";
    INVALID_PAYLOAD(117) "a payload does not match the typed schema of its kind";
    UNKNOWN_SUPPORT_SOURCE(118) "a support claim names a source outside the component's footprint";
    EMPTY_RESPONSE(119) "the response has no components";
    DUPLICATE_RESPONSE(120) "a response with this id is already live";
    TOO_MANY_RESPONSES(121) "too many responses are live at once";
    TOO_MANY_SUPPORT_CLAIMS(122) "a component carries more support claims than allowed";
    GENERATION_OUT_OF_RANGE(123) "the generation is larger than the largest the gateway takes (2^53 - 1)";

    // --- local support (LocalOK = FreshOK and RuleOK over the footprint) ---
    SOURCE_MISSING(200) "a source in the footprint has never been updated";
    STALE_SOURCE(201) "a source in the footprint is older than its age limit";
    EPOCH_CHANGED(202) "a source epoch differs from the one planned against or admitted with";
    BOUNDS_PROVENANCE_CHANGED(203) "the bounds provenance differs from the one planned against or admitted with";
    PROVENANCE_CHANGED(204) "a source provenance differs from the one admitted with";
    CLAIM_MISSING(205) "the catalog requires a support claim the component does not carry";
    CERTIFICATE_MISSING(206) "the catalog requires a certificate the component does not name";
    CERTIFICATE_UNKNOWN(207) "the named certificate is not in the current state";
    CERTIFICATE_NOT_BOUND(208) "the certificate covers a different component digest";
    CERTIFICATE_EXPIRED(209) "the certificate does not cover the action interval";
    INTERVAL_NOT_COVERED(210) "support does not cover the declared interval plus the adapter guard";
    ROLLING_NOT_REFRESHED(211) "a rolling component needs refreshed support before its next sequence";
    OUT_OF_BOUNDS(212) "the target lies outside the current bounds";
    OPERATING_LIMIT(213) "the target or vehicle is outside a configured operating limit";
    ENERGY_LOW(214) "energy is below the configured minimum";
    LINK_UNHEALTHY(215) "the command link is not healthy";
    AUTHORITY_NOT_CURRENT(216) "remote-pilot authority is not current";
    AIRSPACE_NOT_AUTHORIZED(217) "airspace authorization is required and not present";
    PREFLIGHT_MISSING(218) "current preflight or environment evidence is missing";
    SEPARATION_LOST(219) "the target is too close to known traffic";
    VEHICLE_STATE(220) "the vehicle is not in a state that allows this component";
    RULE_FAILED(221) "a catalog rule does not hold";
    CONTROL_NOT_GRANTED(222) "the operator has not handed the vehicle to the gateway, or a pilot took it back";
    CHECKS_FAILED(223) "the required checks (CI) have not passed on the exact change";
    APPROVAL_MISSING(224) "no current approval covers the exact change";
    PROTECTION_DENIES(225) "the target's protection rules do not allow this change now";

    // --- closure and processing phases ---
    PARENT_WITHHELD(300) "a declared prerequisite is not retained, so the dependent is withheld";
    PARENT_FAILED(301) "a declared prerequisite failed terminally";
    DEPS_NOT_READY(302) "a declared prerequisite has not reached its required phase";
    RESPONSE_EXPIRED(303) "the response outlived its catalog lifetime";

    // --- final dispatch gate and token ledger ---
    TOKEN_UNKNOWN(400) "the token is not in the ledger";
    TOKEN_USED(401) "the token was already consumed";
    TOKEN_REVOKED(402) "the token was revoked";
    TOKEN_STALE_BOOT(403) "the token was minted before the last restart";
    TOKEN_MISMATCH(404) "the token does not match the exact admitted instance";
    GENERATION_STALE(405) "the generation is older than the current one";
    SEQUENCE_REUSED(406) "the sequence was already used";
    NOT_RETAINED(407) "the component is not in the current retained set";
    ADAPTER_REJECTED(408) "the adapter refused the non-blocking enqueue";
    INSTANCE_ENDED(409) "the component instance can no longer be dispatched";
    NOT_AN_ACTION(410) "the component is not an action";
    OBSERVATION_FAILED(411) "the vehicle did not confirm the dispatched action";

    // --- recovery: obligations and fresh readmission ---
    NO_OBLIGATION(500) "there is no obligation with this id";
    OBLIGATION_NOT_LIVE(501) "the obligation is discharged, failed or expired";
    OBLIGATION_EXPIRED(502) "the obligation passed its expiry";
    OUT_OF_SCOPE(503) "the candidate lies outside the obligation's replacement scope";
    NOT_REPLACEABLE(504) "only withheld, invalidated or failed instances may be replaced";
    RETRY_LIMIT(505) "the obligation used up its retries";
    CANDIDATE_NOT_SUPPORTED(506) "the fresh candidate failed admission";
    RESPONSE_UNKNOWN(507) "no live response has this id";
    AGENT_MISMATCH(508) "the agent id differs from the response's";

    // --- state providers ---
    UNKNOWN_SOURCE(600) "the catalog defines no source with this name";
    VALUE_KIND_MISMATCH(601) "the value does not have the kind the catalog declares for the source";
    FUTURE_TIMESTAMP(602) "the generation time lies in the future beyond the tolerance";
    OUT_OF_ORDER_UPDATE(603) "the update is older than the newest one held";
    INVALID_UPDATE(604) "the update is malformed";
    CERTIFICATE_TOO_LONG(605) "the certificate's interval is longer than the catalog allows";

    // --- mission contracts ---
    PROFILE_LIMIT(700) "an input exceeds a finite-profile limit";
    WRONG_ROLE(701) "this caller's role may not perform this operation";
    NOT_APPROVED(702) "the root contract carries no principal approval";
    ROOT_EXISTS(703) "a root contract is already registered";
    NO_ROOT(704) "no root contract is registered";
    ROOT_SUSPENDED(705) "the root is suspended; reauthorize first";
    ROOT_CLOSED(706) "the root is closed";
    SCHEMA_INVALID(707) "the request does not match the registered domain or schema";
    EMPTY_LANGUAGE(708) "the permitted trace language is empty";
    INITIAL_UNSAFE(709) "the initial contract is not safe in its own terms";
    WITNESS_MISMATCH(710) "the witness does not bind this root, edit or revision";
    CROSS_ROOT(711) "the operation crosses authorization roots";
    PARENT_NOT_ACTIVE(712) "the parent goal is not active";
    DUPLICATE_GOAL(713) "a goal with this id exists";
    UNKNOWN_GOAL(714) "no goal has this id";
    TRACE_EXPANSION(715) "the continuation is not included in the parent and root languages";
    POLICY_VIOLATION(716) "the current policy forbids the continuation";
    FORBIDDEN_REACHABLE(717) "a forbidden state is reachable";
    FRAME_VIOLATION(718) "an active frame predicate fails on a reachable prefix";
    EFFECT_NOT_APPLICABLE(719) "an effect's precondition fails on a reachable prefix";
    RESOURCE_EXPANSION(720) "the resources exceed the parent's or the root's envelope";
    OBLIGATION_MINTED(721) "the edit introduces an obligation the parent does not carry";
    OBLIGATION_DROPPED(722) "the edit drops an obligation without trusted discharge evidence";
    SUCCESS_NOT_REFINED(723) "closing the edit does not entail the parent's closing predicate";
    STALE_VERSION(724) "a version changed since the witness or reservation was issued";
    JOIN_COMPOSITION(725) "the supplied join is not the complete composition";
    JOIN_NOT_SIBLINGS(726) "join sources must be distinct active siblings";
    EFFECT_NOT_ADMITTED(727) "the effect is not admitted by the selected path's residual languages";
    NO_CURRENT_WITNESS(728) "there is no current witness; reauthorize a path";
    NOT_SELECTED_PATH(729) "the goal is not the leaf of the current witness path";
    RESERVATION_UNKNOWN(730) "no reservation has this id";
    RESERVATION_USED(731) "the reservation was already committed";
    EFFECT_MISMATCH(732) "the committed effect is not the reserved one";
    IDEMPOTENCY_CONFLICT(733) "the idempotency key was used with a different request";
    DESCENDANTS_UNRESOLVED(734) "a descendant goal is still active";
    NOT_COMPLETE(735) "the goal's continuation has not reached a closing trace";
    CLOSING_PREDICATE_FALSE(736) "the closing predicate does not hold";
    OBLIGATIONS_OPEN(737) "an obligation is not discharged";
    MISSING_OBSERVATION(738) "a trusted observation needed by the decision is missing";
    NOT_REPLACEABLE_GOAL(739) "only active or cancelled goals may be replaced";
    EFFECT_UNKNOWN(740) "the effect is not registered in the domain";
    TRACE_NOT_PERMITTED(741) "the committed trace is not a permitted completion";
    ZONE_UNRESOLVED(742) "the action's target lies in no zone of the catalog, so it names no contract effect";

    // --- the service's interfaces (HTTP, stdio, operator) ---
    UNAUTHENTICATED(800) "the request carries no valid credential";
    FORBIDDEN_ROLE(801) "the credential's role may not use this endpoint";
    BODY_TOO_LARGE(802) "the request body exceeds the byte limit";
    NOT_FOUND(803) "no such resource";
    INVALID_REQUEST(804) "the request is not well-formed for this endpoint";
    OBLIGATION_MISMATCH(805) "the candidate names a different obligation than the request path";
    SERVICE_BUSY(806) "the gateway's input queue is full; retry";
    SHUTTING_DOWN(807) "the gateway is shutting down";
    VEHICLE_COMMAND_FAILED(808) "the vehicle did not accept the command";
    OPERATOR_HOLD(809) "the operator holds the vehicle; agent actions do not dispatch";
    RECEIPTS_UNAVAILABLE(810) "receipts cannot be written durably; nothing dispatches and the vehicle holds";
    SOURCE_NOT_WRITABLE(811) "this source is written by another party (the vehicle link, a provider or the operator)";
    NO_VEHICLE_LINK(812) "no heartbeat from the vehicle; the command cannot be sent";
    INVALID_EVENT_ID(813) "`Last-Event-ID` is not an event id of this gateway";
    TOO_MANY_STREAMS(814) "this role has as many event streams open as allowed";
    UNSUPPORTED_MEDIA_TYPE(815) "the request body is not `application/json`";
    METHOD_NOT_ALLOWED(816) "the route does not take this method";
    REQUEST_TIMEOUT(817) "the request did not arrive or complete within the timeout";
    VEHICLE_NOT_ARMED(818) "the vehicle is disarmed; arm it before this command";
    UNKNOWN_TOOL(819) "no MCP tool of that name; list the tools";
    CERTIFIER_DISABLED(820) "the reference certifier is off (`[certifier] enabled`)";
    CREDENTIAL_REVOKED(821) "the credential's principal is revoked (`auth.revoked_file`)";
    RESPONSE_ID_TAKEN(822) "the response id is another agent principal's";
    RATE_LIMITED(823) "the principal sent more requests than its rate allows; wait for `Retry-After`";
    AUTH_BACKOFF(824) "too many failed authentications from this address; wait for `Retry-After`";
    SESSION_NOT_YOURS(825) "the MCP session belongs to another agent principal; open a session of your own";
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ReasonCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(self.name())
        } else {
            s.serialize_u16(self.number())
        }
    }
}

impl<'de> Deserialize<'de> for ReasonCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let name = String::deserialize(d)?;
            ReasonCode::from_name(&name)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown reason code `{name}`")))
        } else {
            let num = u16::deserialize(d)?;
            ReasonCode::ALL
                .iter()
                .copied()
                .find(|c| c.number() == num)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown reason number {num}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_are_unique_and_round_trip() {
        let mut names = std::collections::BTreeSet::new();
        let mut nums = std::collections::BTreeSet::new();
        for &c in ReasonCode::ALL {
            assert!(names.insert(c.name()), "duplicate name {}", c.name());
            assert!(nums.insert(c.number()), "duplicate number {}", c.number());
            assert_eq!(ReasonCode::from_name(c.name()), Some(c));
            assert!(!c.description().is_empty());
        }
    }

    #[test]
    fn pinned_numbers_do_not_move() {
        // Receipts store these numbers: moving one breaks every stored receipt.
        assert_eq!(ReasonCode::STALE_SOURCE.number(), 201);
        assert_eq!(ReasonCode::TOKEN_USED.number(), 401);
        assert_eq!(ReasonCode::OUT_OF_SCOPE.number(), 503);
        assert_eq!(ReasonCode::PROFILE_LIMIT.number(), 700);
    }
}
