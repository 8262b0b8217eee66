//! The index's query for a search's terms, in one of two parts of the
//! records, and the terms' weights as BM25 gives them.

use tantivy::Searcher;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;

use super::analysis::{Field, Terms};
use super::meta::Fields;

/// Which records a search looks among.
///
/// The stop words are a part of their own because they are in nearly
/// every record: in one disjunction with the other words, the index's
/// top-k pruning reads most of their postings (the best 200 of a planted
/// phrase on a 1 GiB log took 6.8 ms so, 0.8 ms as two parts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// Those holding one of the query's terms that is not a stop word (or
    /// any of its words, when all are), scored by all its terms.
    Content,
    /// Those holding only its stop words.
    StopOnly,
}

/// The query for `terms` in `part`: a term's weight as its boost.
pub(crate) fn build(terms: &Terms, part: Part, fields: Fields) -> BooleanQuery {
    let stops = terms.prose.len()..terms.prose.len() + terms.stop.len();
    let (stop, other): (Vec<_>, Vec<_>) = (terms.weighted().into_iter().enumerate())
        .map(|(i, (field, t, weight))| {
            let q: Box<dyn Query> = Box::new(TermQuery::new(
                term(fields, field, t),
                IndexRecordOption::WithFreqs,
            ));
            let q: Box<dyn Query> = match weight == 1.0 {
                true => q,
                false => Box::new(BoostQuery::new(q, weight)),
            };
            (stops.contains(&i), q)
        })
        .partition(|q| q.0);
    let should = |qs: Vec<(bool, Box<dyn Query>)>| qs.into_iter().map(|q| (Occur::Should, q.1));
    let any = |qs| -> Box<dyn Query> { Box::new(BooleanQuery::new(should(qs).collect())) };
    let clauses: Vec<(Occur, Box<dyn Query>)> = match part {
        // Without stop words, a plain disjunction: its top-k pruning is the
        // fast path.
        Part::Content if stop.is_empty() => should(other).collect(),
        // One of the other words, and the stop words scored where they are
        // beside one.
        Part::Content => std::iter::once((Occur::Must, any(other)))
            .chain(should(stop))
            .collect(),
        Part::StopOnly => std::iter::once((Occur::Must, any(stop)))
            .chain(other.into_iter().map(|q| (Occur::MustNot, q.1)))
            .collect(),
    };
    BooleanQuery::new(clauses)
}

/// Each of `terms`' weights (in [`Terms::weighted`] order) as tantivy
/// weighs it: IDF over every document, × (1 + k1), × its boost.
pub(crate) fn weights(
    searcher: &Searcher,
    terms: &Terms,
    fields: Fields,
) -> tantivy::Result<Vec<f32>> {
    let docs: u64 = (searcher.segment_readers().iter())
        .map(|r| u64::from(r.max_doc()))
        .sum();
    (terms.weighted().into_iter())
        .map(|(field, t, boost)| {
            let n = searcher.doc_freq(&term(fields, field, t))?;
            Ok(super::prior::weight(n, docs, boost))
        })
        .collect()
}

fn term(fields: Fields, field: Field, t: &str) -> tantivy::Term {
    let field = match field {
        Field::Prose => fields.body,
        Field::Ident => fields.ids,
    };
    tantivy::Term::from_field_text(field, t)
}
