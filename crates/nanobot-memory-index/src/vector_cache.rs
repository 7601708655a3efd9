//! A process's copy of one index's vectors, so the vector lane ranks in memory instead of
//! reading every vector from storage for each query (a full read took 231 ms p95 at
//! 100,000 chunks of 384 numbers on SQLite, and more over PostgreSQL's wire).
//!
//! The copy is kept true by a [`VectorStamp`] the backend reads with the rows, in one
//! snapshot: stored vectors are never changed in place (a chunk that has a vector keeps it
//! until the chunk or every vector goes), so new vectors are an append (rows numbered from
//! the stamp's `next` on) and anything else bumps the stamp's `epoch` and is a reload. Several
//! processes and instances may write the same index: each checks the stamp on every query,
//! so a copy is never staler than the storage's last commit.

use std::cmp::Ordering;

use chrono::NaiveDateTime;

use crate::chunk::SourceKind;
use crate::port::SearchRequest;

/// Where an index's vectors stand: `epoch` changes whenever a stored vector goes away (a
/// chunk replaced or removed, every vector cleared); every vector stored so far has a
/// sequence number below `next`, and vectors stored later get `next` or above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorStamp {
    /// Bumped whenever a stored vector goes away.
    pub epoch: i64,
    /// The sequence number the next stored vector gets (or more).
    pub next: i64,
}

/// One stored vector with what ranking needs of its chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorRow {
    /// The backend's key of the chunk (to read its text for a hit's snippet).
    pub key: i64,
    /// The hit's source (`history#12`, `MEMORY.md#Travel`).
    pub source: String,
    /// The chunk's position in its group (ties are broken by source, then part).
    pub part: u32,
    /// Which memory it is in.
    pub kind: SourceKind,
    /// When it was written, where known.
    pub at: Option<NaiveDateTime>,
    /// The vector.
    pub vector: Vec<f32>,
}

/// What a backend reads to bring its copy up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheRefresh {
    /// The copy is current: read no rows.
    Current,
    /// Read the vectors numbered `from` or above and [`VectorCache::append`] them.
    Append {
        /// The first sequence number not yet in the copy.
        from: i64,
    },
    /// Read every vector and [`VectorCache::reload`].
    Reload,
}

/// A ranked chunk of the copy: the best of its source.
#[derive(Debug, Clone, PartialEq)]
pub struct Nearest {
    /// Cosine similarity to the query.
    pub score: f64,
    /// The backend's key of the chunk.
    pub key: i64,
    /// The hit's source.
    pub source: String,
    /// Which memory it is in.
    pub kind: SourceKind,
    /// When it was written.
    pub at: Option<NaiveDateTime>,
}

struct RowMeta {
    key: i64,
    source: String,
    part: u32,
    kind: SourceKind,
    at: Option<NaiveDateTime>,
    /// The vector's length (0 for a vector of another length than the copy's).
    norm: f32,
}

/// The copy. Not synchronised: a backend keeps it behind the lock it holds while it reads
/// the stamp and the rows, so a refresh is never interleaved with another.
#[derive(Default)]
pub struct VectorCache {
    stamp: Option<VectorStamp>,
    dimensions: usize,
    rows: Vec<RowMeta>,
    /// `dimensions` numbers per row, row after row.
    numbers: Vec<f32>,
}

impl std::fmt::Debug for VectorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorCache")
            .field("stamp", &self.stamp)
            .field("rows", &self.rows.len())
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

impl VectorCache {
    /// An empty copy (the first query reloads it).
    pub fn new() -> Self {
        VectorCache::default()
    }

    /// What to read to bring the copy to `stamp`.
    pub fn refresh_for(&self, stamp: VectorStamp) -> CacheRefresh {
        match self.stamp {
            Some(held) if held == stamp => CacheRefresh::Current,
            Some(held) if held.epoch == stamp.epoch && stamp.next >= held.next => {
                CacheRefresh::Append { from: held.next }
            }
            _ => CacheRefresh::Reload,
        }
    }

    /// Replaces the copy with `rows`, every vector at `stamp`.
    pub fn reload(&mut self, stamp: VectorStamp, rows: Vec<VectorRow>) {
        self.rows.clear();
        self.numbers.clear();
        self.dimensions = rows.first().map_or(0, |row| row.vector.len());
        self.push(rows);
        self.stamp = Some(stamp);
    }

    /// Adds `rows`, the vectors stored since the copy's stamp, now at `stamp`.
    pub fn append(&mut self, stamp: VectorStamp, rows: Vec<VectorRow>) {
        if self.rows.is_empty() {
            self.dimensions = rows.first().map_or(0, |row| row.vector.len());
        }
        self.push(rows);
        self.stamp = Some(stamp);
    }

    fn push(&mut self, rows: Vec<VectorRow>) {
        self.rows.reserve(rows.len());
        self.numbers.reserve(rows.len() * self.dimensions);
        for row in rows {
            // One model per index, so one length; a stray row of another length scores 0,
            // as `cosine` scores vectors of different lengths.
            let fits = row.vector.len() == self.dimensions;
            let norm = if fits {
                dot(&row.vector, &row.vector).sqrt()
            } else {
                0.0
            };
            if fits {
                self.numbers.extend_from_slice(&row.vector);
            } else {
                self.numbers
                    .extend(std::iter::repeat_n(0.0, self.dimensions));
            }
            self.rows.push(RowMeta {
                key: row.key,
                source: row.source,
                part: row.part,
                kind: row.kind,
                at: row.at,
                norm,
            });
        }
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The chunks nearest to `query` by cosine similarity, within the request's sources and
    /// time bound: the best chunk of each source, best first, ties by source then part, at
    /// most `request.limit`. The same ranking as `best_hits` over `cosine`.
    pub fn nearest(&self, query: &[f32], request: &SearchRequest) -> Vec<Nearest> {
        let dimensions = self.dimensions;
        if dimensions == 0 || query.len() != dimensions {
            return Vec::new();
        }
        let query_norm = dot(query, query).sqrt();
        let mut scored: Vec<(f32, usize)> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, row)| {
                request.sources.contains(&row.kind)
                    && request
                        .since
                        .is_none_or(|since| row.at.is_some_and(|at| at >= since))
            })
            .map(|(i, row)| {
                let score = if row.norm == 0.0 || query_norm == 0.0 {
                    0.0
                } else {
                    let numbers = &self.numbers[i * dimensions..(i + 1) * dimensions];
                    dot(query, numbers) / (query_norm * row.norm)
                };
                (score, i)
            })
            .collect();
        let order = |a: &(f32, usize), b: &(f32, usize)| -> Ordering {
            b.0.total_cmp(&a.0)
                .then_with(|| self.rows[a.1].source.cmp(&self.rows[b.1].source))
                .then_with(|| self.rows[a.1].part.cmp(&self.rows[b.1].part))
        };
        // Most sources have one chunk: the best few hundred rows hold the hits; all rows
        // are sorted only when they do not.
        let shortlist = request.limit.saturating_mul(SHORTLIST_PER_HIT);
        if scored.len() > shortlist {
            scored.select_nth_unstable_by(shortlist, order);
            let mut head: Vec<(f32, usize)> = scored[..shortlist].to_vec();
            head.sort_by(order);
            let hits = self.best_of_sources(&head, request.limit);
            if hits.len() == request.limit {
                return hits;
            }
        }
        scored.sort_by(order);
        self.best_of_sources(&scored, request.limit)
    }

    fn best_of_sources(&self, ranked: &[(f32, usize)], limit: usize) -> Vec<Nearest> {
        let mut hits: Vec<Nearest> = Vec::new();
        for &(score, i) in ranked {
            if hits.len() == limit {
                break;
            }
            let row = &self.rows[i];
            if hits.iter().any(|hit| hit.source == row.source) {
                continue;
            }
            hits.push(Nearest {
                score: f64::from(score),
                key: row.key,
                source: row.source.clone(),
                kind: row.kind,
                at: row.at,
            });
        }
        hits
    }
}

/// Rows ranked in full per hit asked before falling back to sorting them all.
const SHORTLIST_PER_HIT: usize = 32;

/// The dot product, in eight lanes the compiler turns into vector instructions.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a_chunks, a_rest) = a.as_chunks::<8>();
    let (b_chunks, b_rest) = b.as_chunks::<8>();
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += x * y;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vectors::cosine;

    fn row(key: i64, source: &str, part: u32, vector: Vec<f32>) -> VectorRow {
        VectorRow {
            key,
            source: source.into(),
            part,
            kind: SourceKind::History,
            at: None,
            vector,
        }
    }

    #[test]
    fn refresh_follows_the_stamp() {
        let mut cache = VectorCache::new();
        let first = VectorStamp { epoch: 0, next: 3 };
        assert_eq!(cache.refresh_for(first), CacheRefresh::Reload);
        cache.reload(first, vec![row(1, "a", 0, vec![1.0, 0.0])]);
        assert_eq!(cache.refresh_for(first), CacheRefresh::Current);
        let later = VectorStamp { epoch: 0, next: 5 };
        assert_eq!(cache.refresh_for(later), CacheRefresh::Append { from: 3 });
        cache.append(later, vec![row(2, "b", 0, vec![0.0, 1.0])]);
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache.refresh_for(VectorStamp { epoch: 1, next: 5 }),
            CacheRefresh::Reload
        );
        // A stamp that went back (the index was recreated) is a reload too.
        assert_eq!(
            cache.refresh_for(VectorStamp { epoch: 0, next: 1 }),
            CacheRefresh::Reload
        );
    }

    #[test]
    fn nearest_ranks_as_cosine_does_with_ties_by_source_then_part() {
        let vectors = [
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            vec![9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0],
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            vec![0.0; 9],
            vec![-1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0],
        ];
        let mut cache = VectorCache::new();
        cache.reload(
            VectorStamp { epoch: 0, next: 5 },
            vec![
                row(1, "b", 0, vectors[0].clone()),
                row(2, "c", 0, vectors[1].clone()),
                row(3, "a", 1, vectors[2].clone()),
                row(4, "d", 0, vectors[3].clone()),
                row(5, "a", 0, vectors[4].clone()),
            ],
        );
        let query = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.5];
        let hits = cache.nearest(&query, &SearchRequest::new("q").limit(10));
        let sources: Vec<&str> = hits.iter().map(|h| h.source.as_str()).collect();
        // "a" and "b" tie on their best chunk: "a" first; "a"'s best is part 1 (key 3).
        assert_eq!(sources, ["a", "b", "c", "d"]);
        assert_eq!(hits[0].key, 3);
        let expected = f64::from(cosine(&query, &vectors[1]));
        assert!((hits[2].score - expected).abs() < 1e-6, "{hits:?}");
        assert_eq!(hits[3].score, 0.0);
        assert!(
            cache
                .nearest(&[1.0, 2.0], &SearchRequest::new("q"))
                .is_empty()
        );
    }

    #[test]
    fn the_shortlist_gives_what_a_full_sort_gives() {
        // Many chunks under few sources: the shortlist holds too few sources, and the
        // full sort answers.
        let mut rows = Vec::new();
        for i in 0..1_000u32 {
            let source = format!("s{}", i % 3);
            let x = (i as f32 * 0.37).sin();
            rows.push(row(i64::from(i), &source, i, vec![x, 1.0 - x, 0.5]));
        }
        let mut cache = VectorCache::new();
        cache.reload(
            VectorStamp {
                epoch: 0,
                next: 1_000,
            },
            rows,
        );
        let hits = cache.nearest(&[0.2, 0.8, 0.5], &SearchRequest::new("q").limit(3));
        assert_eq!(hits.len(), 3);
    }
}
