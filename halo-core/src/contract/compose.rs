//! Same-root sibling composition `Comp_≺`: every effect-level interleaving of one maximal trace
//! per component that preserves each component's internal order and the precedence edges (a
//! component before another means all of its effects come first).
//!
//! The enumeration is exact and guarded: more than 4,096 topological orders of the components,
//! more than 4,096 products of trace choices, or more than 4,096 raw compositions is a profile
//! limit, reported before anything is truncated; so is a normalized output over 256
//! continuations.

use super::Trace;

/// Internal enumeration guard.
pub const GUARD: usize = 4096;
/// Most continuations a joined goal may hold.
pub const MAX_OUTPUT: usize = 256;

/// Why a composition was not produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComposeError {
    /// A guard or the output limit was exceeded; the string names which.
    ProfileLimit(&'static str),
    /// The precedence edges form a cycle or name an unknown component.
    BadPrecedence,
}

/// Counts linear extensions of the precedence order, stopping above the guard.
fn topological_orders(n: usize, before: &[u64]) -> usize {
    fn go(n: usize, before: &[u64], placed: u64, count: &mut usize) {
        if *count > GUARD {
            return;
        }
        if placed.count_ones() as usize == n {
            *count += 1;
            return;
        }
        for i in 0..n {
            let bit = 1u64 << i;
            if placed & bit == 0 && before.get(i).is_some_and(|b| b & !placed == 0) {
                go(n, before, placed | bit, count);
            }
        }
    }
    let mut count = 0;
    go(n, before, 0, &mut count);
    count
}

/// Composes `components` (each a list of maximal traces) under `precedence` (pairs `a` before
/// `b`, by component index). Returns the sorted, de-duplicated composed maximal traces.
///
/// # Errors
/// [`ComposeError`] when a guard or the output limit is exceeded, or the precedence is invalid.
pub fn compose(
    components: &[Vec<Trace>],
    precedence: &[(usize, usize)],
) -> Result<Vec<Trace>, ComposeError> {
    let n = components.len();
    if n == 0 || n > 64 {
        return Err(ComposeError::BadPrecedence);
    }
    let mut before = vec![0u64; n];
    for &(a, b) in precedence {
        if a >= n || b >= n || a == b {
            return Err(ComposeError::BadPrecedence);
        }
        if let Some(x) = before.get_mut(b) {
            *x |= 1u64 << a;
        }
    }
    // Acyclic: repeatedly place components whose predecessors are placed.
    let full = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let mut placed = 0u64;
    while placed != full {
        let mut progressed = false;
        for (i, b) in before.iter().enumerate() {
            if placed & (1u64 << i) == 0 && b & !placed == 0 {
                placed |= 1u64 << i;
                progressed = true;
            }
        }
        if !progressed {
            return Err(ComposeError::BadPrecedence);
        }
    }
    if topological_orders(n, &before) > GUARD {
        return Err(ComposeError::ProfileLimit("topological orders"));
    }
    let mut product: usize = 1;
    for c in components {
        product = product.saturating_mul(c.len().max(1));
        if product > GUARD {
            return Err(ComposeError::ProfileLimit("trace-choice product"));
        }
    }
    let mut out: Vec<Trace> = Vec::new();
    let mut raw = 0usize;
    let mut choice = vec![0usize; n];
    loop {
        let chosen: Vec<&Trace> = components
            .iter()
            .zip(&choice)
            .filter_map(|(c, k)| c.get(*k))
            .collect();
        if chosen.len() == n || components.iter().any(Vec::is_empty) {
            let mut pos = vec![0usize; n];
            let mut cur: Trace = Vec::new();
            shuffle(&chosen, &before, &mut pos, &mut cur, &mut out, &mut raw)?;
        }
        // Next choice (odometer).
        let mut k = 0;
        loop {
            let Some(c) = choice.get_mut(k) else {
                out.sort_unstable();
                out.dedup();
                if out.len() > MAX_OUTPUT {
                    return Err(ComposeError::ProfileLimit("joined continuations"));
                }
                return Ok(out);
            };
            *c += 1;
            if *c < components.get(k).map_or(0, Vec::len) {
                break;
            }
            *c = 0;
            k += 1;
        }
    }
}

fn shuffle(
    chosen: &[&Trace],
    before: &[u64],
    pos: &mut Vec<usize>,
    cur: &mut Trace,
    out: &mut Vec<Trace>,
    raw: &mut usize,
) -> Result<(), ComposeError> {
    let n = chosen.len();
    let done = |i: usize, pos: &[usize]| {
        pos.get(i).copied().unwrap_or(0) >= chosen.get(i).map_or(0, |t| t.len())
    };
    let mut any = false;
    for i in 0..n {
        if done(i, pos) {
            continue;
        }
        let preds = before.get(i).copied().unwrap_or(0);
        if (0..n).any(|j| preds & (1u64 << j) != 0 && !done(j, pos)) {
            continue;
        }
        any = true;
        let Some(e) = chosen
            .get(i)
            .and_then(|t| t.get(pos.get(i).copied().unwrap_or(0)))
            .copied()
        else {
            continue;
        };
        cur.push(e);
        if let Some(p) = pos.get_mut(i) {
            *p += 1;
        }
        shuffle(chosen, before, pos, cur, out, raw)?;
        if let Some(p) = pos.get_mut(i) {
            *p -= 1;
        }
        cur.pop();
    }
    if !any {
        *raw += 1;
        if *raw > GUARD {
            return Err(ComposeError::ProfileLimit("raw compositions"));
        }
        out.push(cur.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_unordered_pairs_give_six_interleavings() {
        let out = compose(&[vec![vec![1, 2]], vec![vec![3, 4]]], &[]).unwrap();
        assert_eq!(out.len(), 6); // 4! / (2! 2!)
        assert!(out.contains(&vec![1, 3, 2, 4]));
    }

    #[test]
    fn precedence_orders_whole_components() {
        let out = compose(&[vec![vec![1, 2]], vec![vec![3, 4]]], &[(0, 1)]).unwrap();
        assert_eq!(out, vec![vec![1, 2, 3, 4]]);
        assert_eq!(
            compose(&[vec![vec![1]], vec![vec![2]]], &[(0, 1), (1, 0)]),
            Err(ComposeError::BadPrecedence)
        );
    }

    #[test]
    fn guards_fail_closed() {
        // 7 unordered components: 5040 topological orders.
        let seven: Vec<Vec<Trace>> = (0..7).map(|i| vec![vec![i]]).collect();
        assert_eq!(
            compose(&seven, &[]),
            Err(ComposeError::ProfileLimit("topological orders"))
        );
        // 6 unordered: 720 orders, 720 raw compositions.
        let six: Vec<Vec<Trace>> = (0..6).map(|i| vec![vec![i]]).collect();
        assert_eq!(
            compose(&six, &[]).map(|o| o.len()),
            Err(ComposeError::ProfileLimit("joined continuations"))
        );
    }
}
