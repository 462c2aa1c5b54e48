//! `classify` and `covers` over a realistic mix of elements: lesson buttons, answer tiles in
//! several scripts, labelled fields, links, a select, and a few disguised labels.

use classifier::{Action, ElementFacts, FieldKind, Grant, PageFacts, SelectOption, TaskScope, classify, covers};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn element(name: &str, kind: FieldKind) -> ElementFacts {
    ElementFacts {
        role: "button".into(),
        name: Some(name.into()),
        visible_text: Some(name.into()),
        field_kind: kind,
        ..ElementFacts::default()
    }
}

fn mix() -> Vec<ElementFacts> {
    let mut v = Vec::new();
    for name in ["Continue", "Check", "Skip", "Next", "Use keyboard", "Can't listen now", "Close"] {
        v.push(element(name, FieldKind::None));
    }
    for tile in [
        "el gato",
        "la manzana",
        "Ich bin müde",
        "das Brot",
        "je suis",
        "water",
        "the boy",
        "私は学生です",
        "мальчик",
        "شكرا جزيلا",
        "नमस्ते",
        "안녕하세요",
    ] {
        let mut e = element(tile, FieldKind::None);
        e.aria_label = Some(tile.into());
        v.push(e);
    }
    let mut input = element("Type in English", FieldKind::TextArea);
    input.placeholder = Some("Type in English".into());
    v.push(input);
    let mut link = element("Next lesson", FieldKind::None);
    link.role = "link".into();
    link.nav_targets = vec!["https://www.lesson.test/lesson/unit-4/skill-1".into()];
    v.push(link);
    let mut select = element("Choose", FieldKind::Select);
    select.options = ["el perro", "la casa", "el coche", "la mesa"]
        .iter()
        .map(|o| SelectOption { value: (*o).into(), label: Some((*o).into()), ..SelectOption::default() })
        .collect();
    v.push(select);
    for hostile in ["Get Super for $12.99", "Рау", "S1gn 1n", "\u{202E}eteleD", "Pa\u{200B}y now", "Ｂｕｙ gems"]
    {
        v.push(element(hostile, FieldKind::None));
    }
    v
}

fn bench(c: &mut Criterion) {
    let elements = mix();
    let page = PageFacts { url: "https://www.lesson.test/lesson/unit-3".into() };
    let grant = Grant::Task(TaskScope {
        origin: "https://www.lesson.test".into(),
        path_prefix: "/lesson".into(),
        chars_remaining: 4096,
    });
    let mut group = c.benchmark_group("classifier");
    group.throughput(Throughput::Elements(elements.len() as u64));
    group.bench_function("classify", |b| {
        b.iter(|| elements.iter().map(|e| classify(e, &page)).filter(|c| c.code() == "unknown").count())
    });
    group.bench_function("covers_click", |b| {
        b.iter(|| elements.iter().filter(|e| covers(&grant, &Action::Click, e, &page).is_ok()).count())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
