//! Questions about time and the words that name a day (English): what
//! the second scoring (`prior.rs`) looks for in a query and in a record.

/// Whether a question, by its first words, asks about time (English):
/// "when…", "since when…", "what day/date/month/year/time…", "on what
/// day/date…", "which came/happened/was first/earlier/later/last/sooner…",
/// "how long…", "how many days/weeks/months/years…", "by how many
/// days/weeks/months…".
pub(crate) fn asks_when(question: &str) -> bool {
    let words: Vec<String> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(4)
        .map(str::to_lowercase)
        .collect();
    let w = |i: usize, any: &[&str]| words.get(i).is_some_and(|x| any.contains(&x.as_str()));
    let units = ["days", "weeks", "months", "years"];
    w(0, &["when"])
        || (w(0, &["since"]) && w(1, &["when"]))
        || (w(0, &["what"]) && w(1, &["day", "date", "month", "year", "time"]))
        || (w(0, &["on"]) && w(1, &["what"]) && w(2, &["day", "date"]))
        || (w(0, &["which", "what"])
            && w(1, &["came", "happened", "was"])
            && w(2, &["first", "earlier", "later", "last", "sooner"]))
        || (w(0, &["how"]) && w(1, &["long"]))
        || (w(0, &["how"]) && w(1, &["many"]) && w(2, &units))
        || (w(0, &["by"]) && w(1, &["how"]) && w(2, &["many"]) && w(3, &units[..3]))
}

/// The words that name a day, analysed as a record's words are ("may" is
/// not one: it is mostly the verb).
pub(crate) const DATE_WORDS: [&str; 24] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "yesterday",
    "today",
    "tomorrow",
    "tonight",
    "ago",
    "weekend",
];

/// An ordinal of a day of the month: `1st` … `31st`, `12th`.
pub(crate) fn ordinal(term: &str) -> bool {
    let digits = term.bytes().take_while(u8::is_ascii_digit).count();
    (1..=2).contains(&digits) && matches!(&term[digits..], "st" | "nd" | "rd" | "th")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_about_time_are_told_by_their_first_words() {
        for q in [
            "When did Maya move to Lisbon?",
            "since when has he run?",
            "What date was the recital?",
            "On what day did they meet?",
            "Which came first, the trip or the move?",
            "What happened first: the move or the new job?",
            "How long has Tom played the cello?",
            "How many weeks before the race did she start?",
            "By how many days did it slip?",
        ] {
            assert!(asks_when(q), "{q}");
        }
        for q in [
            "What did Maya say about Lisbon?",
            "Who came first in the race?",
            "How many cats does she have?",
            "Where was the recital when it rained?",
            "what",
            "",
        ] {
            assert!(!asks_when(q), "{q}");
        }
    }

    #[test]
    fn ordinals_of_a_day_and_nothing_else() {
        for t in ["1st", "2nd", "3rd", "12th", "31st"] {
            assert!(ordinal(t), "{t}");
        }
        for t in ["123rd", "th", "1", "1sth", "first", "4x"] {
            assert!(!ordinal(t), "{t}");
        }
    }
}
