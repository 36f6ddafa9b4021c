"""Stop-word lists for keyword extraction (R§9): plain word lists, one set per language."""

from __future__ import annotations

EN = frozenset(["a", "an", "the", "this", "that", "these", "those", "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "you", "your", "yours", "he", "him", "his", "she", "her", "hers", "it", "its", "they", "them", "their", "theirs", "is", "am", "are", "was", "were", "be", "been", "being", "have", "has", "had", "do", "does", "did", "will", "would", "could", "should", "can", "may", "might", "must", "shall", "to", "of", "in", "on", "at", "by", "for", "with", "from", "about", "into", "over", "under", "after", "before", "between", "through", "during", "and", "or", "but", "if", "then", "so", "than", "too", "very", "just", "also", "not", "no", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "all", "any", "some", "each", "every", "there", "here", "yesterday", "today", "tomorrow", "recently", "ago", "now", "earlier", "later", "lately", "before", "thing", "things", "stuff", "something", "anything", "everything", "nothing", "someone", "anyone", "please", "help", "find", "show", "get", "tell", "give", "let", "know", "remember", "recall"])

ES = frozenset(["el", "la", "los", "las", "un", "una", "unos", "unas", "de", "del", "al", "y", "o", "u", "pero", "si", "no", "que", "en", "con", "por", "para", "sobre", "entre", "como", "mas", "más", "muy", "ya", "es", "son", "fue", "era", "ser", "estar", "está", "están", "este", "esta", "estos", "estas", "ese", "esa", "eso", "lo", "le", "les", "se", "su", "sus", "mi", "mis", "tu", "tus", "nos", "yo", "tú", "él", "ella", "ellos", "ellas", "qué", "cuál", "cuándo", "dónde", "cómo", "quién", "ayer", "hoy", "mañana", "ahora", "antes", "después", "algo", "nada", "cosa"])

PT = frozenset(["o", "a", "os", "as", "um", "uma", "uns", "umas", "de", "do", "da", "dos", "das", "no", "na", "nos", "nas", "em", "e", "ou", "mas", "se", "não", "que", "com", "por", "para", "sobre", "entre", "como", "mais", "muito", "já", "é", "são", "foi", "era", "ser", "estar", "está", "estão", "este", "esta", "isso", "isto", "esse", "essa", "eu", "tu", "ele", "ela", "eles", "elas", "nós", "vós", "meu", "minha", "seu", "sua", "qual", "quando", "onde", "quem", "ontem", "hoje", "amanhã", "agora", "antes", "depois", "algo", "nada", "coisa"])

AR = frozenset(["في", "من", "على", "إلى", "عن", "مع", "هذا", "هذه", "ذلك", "تلك", "هو", "هي", "هم", "نحن", "أنا", "أنت", "ما", "ماذا", "متى", "أين", "كيف", "لماذا", "الذي", "التي", "و", "أو", "لكن", "ثم", "قد", "لا", "لم", "لن", "كان", "كانت", "يكون", "كل", "بعض", "أي", "هل", "بالأمس", "اليوم", "غدا", "الآن", "قبل", "بعد", "شيء", "أمس"])

KO = frozenset(["나", "나는", "너", "우리", "저", "저는", "그", "그녀", "그들", "이", "그", "저것", "이것", "그것", "것", "수", "등", "및", "그리고", "그래서", "그러나", "하지만", "또는", "또", "및", "에서", "으로", "에게", "한테", "처럼", "보다", "까지", "부터", "은", "는", "이", "가", "을", "를", "의", "에", "로", "와", "과", "도", "만", "뭐", "무엇", "언제", "어디", "어떻게", "왜", "누구", "어제", "오늘", "내일", "지금", "전에", "후에", "좀", "제발", "있다", "없다", "하다", "되다", "이다"])

JA = frozenset(["これ", "それ", "あれ", "この", "その", "あの", "ここ", "そこ", "あそこ", "こと", "もの", "ため", "よう", "した", "して", "する", "される", "いる", "ある", "なる", "です", "ます", "でした", "ません", "から", "まで", "より", "など", "について", "私", "僕", "俺", "あなた", "彼", "彼女", "何", "いつ", "どこ", "どう", "なぜ", "誰", "昨日", "今日", "明日", "今", "前", "後", "ちょっと"])

ZH = frozenset(["的", "了", "在", "是", "我", "你", "他", "她", "它", "们", "我们", "你们", "他们", "这", "那", "这个", "那个", "这些", "那些", "之前", "之后", "以前", "以后", "和", "与", "或", "但", "就", "都", "也", "还", "又", "很", "太", "吗", "呢", "吧", "啊", "什么", "怎么", "为什么", "哪", "哪里", "谁", "昨天", "今天", "明天", "现在", "一些", "一下", "东西", "事情", "请", "帮", "有", "没有", "被", "把", "给"])

ALL = EN | ES | PT | AR | KO | JA | ZH
