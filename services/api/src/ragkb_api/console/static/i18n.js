// English and Japanese. The browser's language decides at first; the switch in the top bar remembers a choice
// (in localStorage: a language preference, nothing else is kept there).
"use strict";

const STORE = "ragkb.console.lang";

const en = {
  title: "ragkb console", skip: "Skip to content", language: "Language", signOut: "Sign out", loading: "Loading…",
  signIn: "Sign in", signInTitle: "Sign in to ragkb", signInLead: "Use an API key. You will see and do exactly what this key allows.",
  apiKey: "API key", apiKeyHint: "rk_… or the bootstrap admin key. It is kept on the server for this session only, never in the browser.",
  signInFineprint: "The session ends after 30 minutes without use, 12 hours at most, or when you sign out.",
  signedInAs: "{label} · {role}", bootstrapKey: "bootstrap admin key", "role.admin": "admin", "role.client": "client",
  "nav.kbs": "Knowledge bases", "nav.search": "Search test", "nav.keys": "API keys", "nav.documents": "Documents",
  "nav.jobs": "Jobs", "nav.evaluations": "Evaluations", "nav.settings": "Settings", kbSections: "Knowledge base sections",
  error: "Error", notFound: "Page not found", nothingYet: "Nothing yet.", confirm: "Confirm", cancel: "Cancel", create: "Create",
  save: "Save changes", delete: "Delete", edit: "Edit", refresh: "Refresh", search: "Search", actions: "Actions",
  created: "Created", updated: "Updated", previous: "Previous", next: "Next", pageOf: "Page {page} of {pages}",
  typeToConfirm: "Type “{word}” to confirm",
  "status.pending": "pending", "status.processing": "processing", "status.done": "done", "status.failed": "failed",
  "status.queued": "queued", "status.running": "running", "status.succeeded": "succeeded", "status.cancelled": "cancelled",
  "status.active": "active", "status.deleting": "deleting", "status.uploading": "uploading", "status.revoked": "revoked",
  "status.passed": "passed", "status.skipped": "skipped",
  "kb.lead": "Each knowledge base has its own documents, index and retrieval settings.", "kb.new": "New knowledge base",
  "kb.name": "Name", "kb.description": "Description", "kb.status": "Status", "kb.documents": "Documents", "kb.chunks": "Indexed passages",
  "kb.model": "Embedding model", "kb.analyzer": "Keyword analyzer", "kb.none": "No knowledge bases yet.",
  "kb.failedCount": "{n} failed", "kb.inFlight": "{n} in progress", "kb.japaneseAnalyzer": "Japanese analyzer",
  "kb.sudachi": "Sudachi (words, normalized)", "kb.charBigram": "Character bigrams", "kb.charBigrams": "Add character bigrams",
  "kb.analyzerHint": "Fixed for the knowledge base; changing it later needs a re-index.", "kb.created": "Knowledge base “{name}” created.",
  "kb.beingDeleted": "This knowledge base is being deleted.",
  "doc.lead": "Upload files, follow them through parsing and indexing, and look inside what was indexed.",
  "doc.upload": "Upload", "doc.dropHere": "Drop files here", "doc.dropHint": "Markdown, text, PDF, Office, HTML, CSV, JSON, code … many at once.",
  "doc.chooseFiles": "Choose files", "doc.labelsForUpload": "Labels for these uploads", "doc.labelsHint": "Comma-separated, optional.",
  "doc.labelsPlaceholder": "policy, travel", "doc.uploads": "Uploads", "doc.uploadProgress": "Upload of {name}",
  "doc.searchPlaceholder": "Title or source id", "doc.anyStatus": "Any status", "doc.anyLabel": "Any label", "doc.anyType": "Any type",
  "doc.anyFormat": "Any format", "doc.title": "Document", "doc.status": "Status", "doc.type": "Type", "doc.format": "Format",
  "doc.labels": "Labels", "doc.chunks": "Passages", "doc.size": "Size", "doc.knowledge": "knowledge", "doc.reference": "reference",
  "doc.summary": "{shown} of {total} documents · {done} done · {failed} failed · {inFlight} in progress",
  "doc.none": "No documents yet: drop some files above.", "doc.noMatch": "No document matches these filters.",
  "doc.retryFailed": "Retry {n} failed", "doc.sourceId": "Source id", "doc.filename": "File name", "doc.version": "Version",
  "doc.versionValue": "{version} (indexed: {indexed})", "doc.attempts": "Attempts", "doc.sha256": "SHA-256", "doc.indexedAt": "Indexed",
  "doc.metadata": "Metadata", "doc.details": "Details", "doc.timings": "Stage timings", "doc.stage": "Stage",
  "doc.download": "Download original", "doc.retry": "Retry", "doc.retried": "Queued again.", "doc.deleteTitle": "Delete this document?",
  "doc.deleteBody": "“{title}” and its passages leave the index. This cannot be undone.", "doc.deleted": "Document deleted.",
  "doc.back": "All documents", "doc.failureReason": "Why it failed", "doc.noReason": "No reason was recorded.",
  "doc.chunksTitle": "Passages as indexed", "doc.notIndexed": "Nothing of this document is indexed yet.",
  "doc.chunksOf": "Passages {from}–{to} of {total} (version {version})", "doc.page": "p. {page}", "doc.offsets": "chars {start}–{end}",
  "job.lead": "Sync, retry, re-index and deletion jobs, live.", "job.recent": "Recent jobs", "job.none": "No jobs yet.",
  "job.kind.sync": "Sync", "job.kind.retry": "Retry failed", "job.kind.reindex": "Re-index", "job.kind.kb_delete": "Deletion", "job.kind.ingest": "Ingest",
  "job.progress": "{current} of {total}", "job.progressOf": "Progress of the {kind} job", "job.noItems": "no items yet",
  "job.count.uploaded": "uploaded", "job.count.unchanged": "unchanged", "job.count.deleted": "deleted", "job.count.failed": "failed",
  "job.count.reindexed": "re-indexed", "job.times": "created {created} · finished {finished}", "job.errors": "{n} error(s)",
  "job.cancel": "Cancel job", "job.retryFailed": "Retry failed documents", "job.reindex": "Re-index…", "job.rollback": "Roll back",
  "job.rollbackTitle": "Roll back the index?", "job.rollbackBody": "The previous index generation serves again, with the settings it was built with.",
  "job.rolledBack": "Rolled back to the previous generation.", "job.started": "{kind} job started.",
  "job.gatePassed": "quality gate passed", "job.gateFailed": "quality gate refused", "job.gateSkipped": "gate skipped",
  "job.gateFigures": "nDCG@10 {old} → {new} (tolerance {tolerance}, {queries} queries)",
  "job.indexInfo": "Index: {chunks} passages in generation {live} (generations: {generations}).",
  "job.reindexTitle": "Re-index", "job.reindexLead": "Rebuild every document from its original into a new generation while the current one serves; empty fields keep today's settings.",
  "job.embeddingModel": "Embedding model", "job.embeddingHint": "Only models the server allows.", "job.keepAnalyzer": "Keep the current analyzer",
  "job.skipGate": "Skip the quality gate", "job.skipGateHint": "Switch even if the gate's question set scores lower.", "job.startReindex": "Start re-index",
  "settings.lead": "Changes apply to the next search (retrieval) or the next ingested document (chunking).",
  "settings.general": "General", "settings.chunking": "Chunking", "settings.chunkingLead": "How documents ingested from now on are cut (tokens of the embedding model) and embedded.",
  "settings.passage_precision": "Passage precision", "settings.precisionAuto": "auto (fastest here)", "settings.precisionFloat32": "float32", "settings.precisionInt8": "int8 (faster)", "settings.precisionInt8Mixed": "int8-mixed (faster)", "settings.precisionInt8Block": "int8-block (exact)",
  "settings.hint.passage_precision": "auto (the default): float32 or int8-block, whichever the worker's CPU runs faster (int8-block: about 1.3× float32 with AVX-512 VNNI, 0.8× with AVX2 alone; nDCG@10 within 0.0013). int8-mixed and int8: about 1.5× as fast, up to 0.0033 and 0.0057 lower. Applies to documents ingested afterwards.",
  "settings.retrieval": "Retrieval", "settings.retrievalLead": "Empty fields go back to the defaults.", "settings.sync": "Sync rules",
  "settings.syncLead": "Which files of a synced folder belong in this knowledge base.", "settings.onePerLine": "One per line.",
  "settings.target_tokens": "Target tokens", "settings.max_tokens": "Max tokens", "settings.overlap_tokens": "Overlap tokens",
  "settings.noise_patterns": "Noise patterns (regular expressions)", "settings.top_k": "top_k", "settings.rrf_k": "rrf_k",
  "settings.second_model": "Second model", "settings.secondModelNone": "none", "settings.hint.second_model": "A second embedding model for English KBs: a third search leg (all-MiniLM-L6-v2). Set when the KB is created, changed only by a re-index.", "settings.second_weight": "Second model weight", "settings.hint.second_weight": "The weight of the second model's leg in hybrid searches (KBs with a second model only); 0 drops it.",
  "settings.dense_weight": "Dense weight", "settings.keyword_weight": "Keyword weight", "settings.candidate_multiplier": "Candidate multiplier", "settings.feedback_passages": "Feedback passages", "settings.feedback_weight": "Feedback weight",
  "settings.score_threshold": "Score threshold", "settings.rerank_budget_ms": "Rerank budget (ms)", "settings.rerank_weight": "Rerank weight",
  "settings.max_blocks": "Max passages", "settings.hybrid": "Hybrid (dense + keyword)", "settings.fusion": "Fusion", "settings.rerank": "Rerank",
  "settings.rerankAuto": "auto (when the server has a reranker)", "settings.rerankOn": "on", "settings.rerankOff": "off",
  "settings.reranker_model": "Reranker model", "settings.serverDefault": "server default",
  "settings.include_prefixes": "Include prefixes", "settings.exclude_patterns": "Exclude patterns", "settings.extensions": "Extensions",
  "settings.saved": "Settings saved.", "settings.fixFields": "Some fields need a fix: see the messages beside them.",
  "settings.analyzer": "Analyzer", "settings.analyzerLead": "Fixed since creation; a re-index can change it.", "settings.analyzerVersion": "Analyzer version", "settings.bm25": "BM25 k1 / b",
  "settings.danger": "Delete this knowledge base", "settings.deleteLead": "Deletes the index, every document and the originals only it used.",
  "settings.deleteKb": "Delete knowledge base…", "settings.deleteTitle": "Delete the knowledge base?",
  "settings.deleteBody": "“{name}”, its documents and its index are deleted for good.", "settings.deleted": "“{name}” was deleted.",
  "search.lead": "One query as semantic, keyword, hybrid and hybrid+rerank side by side, and why a document is or is not in each answer.",
  "search.chooseKb": "Choose a knowledge base to test.", "search.query": "Query", "search.queryPlaceholder": "What a user would ask",
  "search.run": "Run", "search.running": "Running…", "search.done": "Done in {ms} ms (round trip).",
  "search.expected": "Expected documents", "search.pickExpected": "Add a document…", "search.expectedHint": "Each is traced through every run: its rank, or the stage that dropped it.",
  "search.expectedIds": "…or document ids", "search.expectedIdsPlaceholder": "ids, comma-separated", "search.removeExpected": "Remove {name}",
  "search.overrides": "Settings overrides (empty: the knowledge base's own)", "search.whyNot": "Expected documents across runs",
  "search.expectedDocument": "Expected document", "search.rank": "#{rank}", "search.droppedBy": "dropped by {stage}",
  "search.notInAnswer": "not in the answer", "search.legRanks": "dense {dense} · keyword {keyword} · fused {fused}",
  "search.degraded": "degraded", "search.reranked": "reranked", "search.ok": "ok", "search.took": "mode {mode} · {ms} ms",
  "search.noPassages": "No passages.", "search.dropped": "{n} dropped candidate(s)", "search.effective": "Effective settings",
  "search.expectedMark": "★ expected",
  "search.original": "original",
  "eval.lead": "Score retrieval on question sets with relevance judgements, and compare two settings query by query.",
  "eval.sets": "Question sets", "eval.setName": "Name", "eval.queries": "Queries", "eval.judgements": "Judgements", "eval.gate": "Quality gate",
  "eval.isGate": "gate", "eval.makeGate": "Make gate", "eval.deleteSet": "Delete the question set?", "eval.deleteSetBody": "“{name}” is deleted.",
  "eval.noSets": "No question sets yet.", "eval.import": "Import a BEIR question set", "eval.importLead": "queries.jsonl and a qrels TSV (qrels/<split>.tsv); only judged queries are kept.",
  "eval.queriesFile": "queries.jsonl", "eval.qrelsFile": "qrels (.tsv)", "eval.asGate": "Use as the re-index quality gate", "eval.importButton": "Import",
  "eval.needFiles": "Choose both files.", "eval.imported": "“{name}” imported ({n} queries).", "eval.run": "Run an evaluation",
  "eval.importFirst": "Import a question set first.", "eval.set": "Question set", "eval.mode": "Mode", "eval.kbMode": "the knowledge base's own",
  "eval.settings": "Settings overrides (JSON)", "eval.settingsHint": "e.g. {\"top_k\": 20, \"fusion\": \"rrf\"}; empty: none.",
  "eval.compare": "Compare with a second run", "eval.compareMode": "Second run: mode", "eval.compareSettings": "Second run: settings (JSON)",
  "eval.maxQueries": "Queries (first N)", "eval.all": "all", "eval.runButton": "Run evaluation", "eval.running": "Evaluating…",
  "eval.done": "Done in {ms} ms.", "eval.badJson": "Settings must be a JSON object: {error}", "eval.base": "Run A", "eval.compareRun": "Run B",
  "eval.metrics": "Metrics ({queries} queries, depth {depth})", "eval.metric": "Metric", "eval.delta": "B − A", "eval.winsLosses": "B wins / losses / ties",
  "eval.chartTitle": "Metrics of both runs", "eval.chartCaption": "Mean over the queries; 1 is perfect.",
  "eval.degraded": "{n} queries were answered degraded:", "eval.perQuery": "Queries where the runs differ ({metric}, {n})",
  "eval.query": "Query", "eval.topDocs": "First documents", "eval.noDifferences": "Both runs scored every query the same.",
  "key.lead": "Keys for applications, agents and people. A client key sees only the knowledge bases granted to it.",
  "key.new": "New key", "key.name": "Name", "key.role": "Role", "key.grants": "Grants", "key.filter": "Search filter",
  "key.allKbs": "every knowledge base", "key.revokedAt": "revoked {when}", "key.revoke": "Revoke", "key.revokeTitle": "Revoke this key?",
  "key.revokeBody": "“{name}” stops working at once, everywhere.", "key.revoked": "“{name}” revoked.", "key.perm.none": "no access",
  "key.perm.read": "read", "key.perm.write": "read & write", "key.grantFor": "Access to {kb}", "key.grantsLead": "Per knowledge base: read (search, list) or write (also upload, delete).",
  "key.filterLead": "ANDed into every search this key makes; a request can narrow it, never widen it.", "key.labelsAny": "Only passages with any of these labels",
  "key.create": "Create key", "key.editTitle": "Grants of “{name}”", "key.updated": "“{name}” updated.",
  "key.createdTitle": "Key “{name}” created", "key.shownOnce": "Copy the key now: it is shown this once and cannot be shown again.",
  "key.theKey": "The new key", "key.copy": "Copy", "key.copied": "Copied", "key.saved": "I have saved it",
};

const ja = {
  title: "ragkb コンソール", skip: "本文へ移動", language: "言語", signOut: "サインアウト", loading: "読み込み中…",
  signIn: "サインイン", signInTitle: "ragkb にサインイン", signInLead: "API キーでサインインします。このキーに許されたことだけが見え、実行できます。",
  apiKey: "API キー", apiKeyHint: "rk_… またはブートストラップ管理キー。このセッションの間だけサーバー側に保持され、ブラウザーには保存されません。",
  signInFineprint: "30 分操作がないとき、最長 12 時間、またはサインアウトでセッションは終了します。",
  signedInAs: "{label} · {role}", bootstrapKey: "ブートストラップ管理キー", "role.admin": "管理者", "role.client": "クライアント",
  "nav.kbs": "ナレッジベース", "nav.search": "検索テスト", "nav.keys": "API キー", "nav.documents": "ドキュメント",
  "nav.jobs": "ジョブ", "nav.evaluations": "評価", "nav.settings": "設定", kbSections: "ナレッジベースのセクション",
  error: "エラー", notFound: "ページが見つかりません", nothingYet: "まだありません。", confirm: "確認", cancel: "キャンセル", create: "作成",
  save: "変更を保存", delete: "削除", edit: "編集", refresh: "再読み込み", search: "検索", actions: "操作",
  created: "作成日時", updated: "更新日時", previous: "前へ", next: "次へ", pageOf: "{page} / {pages} ページ",
  typeToConfirm: "確認のため「{word}」と入力してください",
  "status.pending": "待機中", "status.processing": "処理中", "status.done": "完了", "status.failed": "失敗",
  "status.queued": "待機中", "status.running": "実行中", "status.succeeded": "成功", "status.cancelled": "取消",
  "status.active": "有効", "status.deleting": "削除中", "status.uploading": "アップロード中", "status.revoked": "失効",
  "status.passed": "合格", "status.skipped": "スキップ",
  "kb.lead": "ナレッジベースごとにドキュメント、インデックス、検索設定を持ちます。", "kb.new": "新しいナレッジベース",
  "kb.name": "名前", "kb.description": "説明", "kb.status": "状態", "kb.documents": "ドキュメント", "kb.chunks": "インデックス済みパッセージ",
  "kb.model": "埋め込みモデル", "kb.analyzer": "キーワード解析器", "kb.none": "ナレッジベースはまだありません。",
  "kb.failedCount": "失敗 {n}", "kb.inFlight": "処理中 {n}", "kb.japaneseAnalyzer": "日本語解析器",
  "kb.sudachi": "Sudachi（単語・正規化）", "kb.charBigram": "文字バイグラム", "kb.charBigrams": "文字バイグラムを追加",
  "kb.analyzerHint": "ナレッジベースごとに固定です。後で変更するには再インデックスが必要です。", "kb.created": "ナレッジベース「{name}」を作成しました。",
  "kb.beingDeleted": "このナレッジベースは削除中です。",
  "doc.lead": "ファイルをアップロードし、解析とインデックス作成の進み具合を確認し、インデックスの中身を見られます。",
  "doc.upload": "アップロード", "doc.dropHere": "ここにファイルをドロップ", "doc.dropHint": "Markdown、テキスト、PDF、Office、HTML、CSV、JSON、コードなど。複数同時に可。",
  "doc.chooseFiles": "ファイルを選択", "doc.labelsForUpload": "アップロードに付けるラベル", "doc.labelsHint": "カンマ区切り（任意）。",
  "doc.labelsPlaceholder": "規程, 出張", "doc.uploads": "アップロード", "doc.uploadProgress": "{name} のアップロード",
  "doc.searchPlaceholder": "タイトルまたはソース ID", "doc.anyStatus": "すべての状態", "doc.anyLabel": "すべてのラベル", "doc.anyType": "すべての種別",
  "doc.anyFormat": "すべての形式", "doc.title": "ドキュメント", "doc.status": "状態", "doc.type": "種別", "doc.format": "形式",
  "doc.labels": "ラベル", "doc.chunks": "パッセージ", "doc.size": "サイズ", "doc.knowledge": "ナレッジ", "doc.reference": "原本",
  "doc.summary": "{total} 件中 {shown} 件を表示 · 完了 {done} · 失敗 {failed} · 処理中 {inFlight}",
  "doc.none": "ドキュメントはまだありません。上にファイルをドロップしてください。", "doc.noMatch": "条件に一致するドキュメントはありません。",
  "doc.retryFailed": "失敗した {n} 件を再試行", "doc.sourceId": "ソース ID", "doc.filename": "ファイル名", "doc.version": "バージョン",
  "doc.versionValue": "{version}（インデックス済み: {indexed}）", "doc.attempts": "試行回数", "doc.sha256": "SHA-256", "doc.indexedAt": "インデックス日時",
  "doc.metadata": "メタデータ", "doc.details": "詳細", "doc.timings": "段階ごとの所要時間", "doc.stage": "段階",
  "doc.download": "原本をダウンロード", "doc.retry": "再試行", "doc.retried": "再度キューに入れました。", "doc.deleteTitle": "このドキュメントを削除しますか？",
  "doc.deleteBody": "「{title}」とそのパッセージがインデックスから削除されます。元に戻せません。", "doc.deleted": "ドキュメントを削除しました。",
  "doc.back": "ドキュメント一覧", "doc.failureReason": "失敗の理由", "doc.noReason": "理由は記録されていません。",
  "doc.chunksTitle": "インデックスされたパッセージ", "doc.notIndexed": "このドキュメントはまだインデックスされていません。",
  "doc.chunksOf": "パッセージ {from}–{to} / {total}（バージョン {version}）", "doc.page": "{page} ページ", "doc.offsets": "文字 {start}–{end}",
  "job.lead": "同期・再試行・再インデックス・削除のジョブをリアルタイムで表示します。", "job.recent": "最近のジョブ", "job.none": "ジョブはまだありません。",
  "job.kind.sync": "同期", "job.kind.retry": "失敗分の再試行", "job.kind.reindex": "再インデックス", "job.kind.kb_delete": "削除", "job.kind.ingest": "取り込み",
  "job.progress": "{total} 件中 {current} 件", "job.progressOf": "{kind} ジョブの進捗", "job.noItems": "まだ項目がありません",
  "job.count.uploaded": "アップロード", "job.count.unchanged": "変更なし", "job.count.deleted": "削除", "job.count.failed": "失敗",
  "job.count.reindexed": "再インデックス", "job.times": "作成 {created} · 終了 {finished}", "job.errors": "エラー {n} 件",
  "job.cancel": "ジョブを取り消す", "job.retryFailed": "失敗したドキュメントを再試行", "job.reindex": "再インデックス…", "job.rollback": "ロールバック",
  "job.rollbackTitle": "インデックスをロールバックしますか？", "job.rollbackBody": "一つ前のインデックス世代が、作成時の設定で再び使われます。",
  "job.rolledBack": "一つ前の世代にロールバックしました。", "job.started": "{kind}ジョブを開始しました。",
  "job.gatePassed": "品質ゲート合格", "job.gateFailed": "品質ゲートで拒否", "job.gateSkipped": "ゲートをスキップ",
  "job.gateFigures": "nDCG@10 {old} → {new}（許容差 {tolerance}、{queries} 問）",
  "job.indexInfo": "インデックス: 世代 {live} に {chunks} パッセージ（世代: {generations}）。",
  "job.reindexTitle": "再インデックス", "job.reindexLead": "現在の世代で検索を続けながら、すべてのドキュメントを原本から新しい世代に作り直します。空欄の項目は現在の設定のままです。",
  "job.embeddingModel": "埋め込みモデル", "job.embeddingHint": "サーバーが許可したモデルのみ。", "job.keepAnalyzer": "現在の解析器のまま",
  "job.skipGate": "品質ゲートをスキップ", "job.skipGateHint": "ゲートの質問セットでスコアが下がっても切り替えます。", "job.startReindex": "再インデックスを開始",
  "settings.lead": "検索設定は次の検索から、チャンク設定はこれから取り込むドキュメントから適用されます。",
  "settings.general": "基本", "settings.chunking": "チャンク分割", "settings.chunkingLead": "これから取り込むドキュメントの分割方法（埋め込みモデルのトークン数）と埋め込み方。",
  "settings.passage_precision": "パッセージの精度", "settings.precisionAuto": "auto（この CPU で最速）", "settings.precisionFloat32": "float32", "settings.precisionInt8": "int8（高速）", "settings.precisionInt8Mixed": "int8-mixed（高速）", "settings.precisionInt8Block": "int8-block（高精度）",
  "settings.hint.passage_precision": "auto（既定）：ワーカーの CPU で速い方の float32 か int8-block（int8-block は AVX-512 VNNI で float32 の約 1.3 倍、AVX2 のみでは約 0.8 倍。nDCG@10 の差は 0.0013 以内）。int8-mixed と int8 は約 1.5 倍速いが、低下は最大 0.0033 と 0.0057。以後に取り込む文書に適用。",
  "settings.retrieval": "検索", "settings.retrievalLead": "空欄の項目は既定値に戻ります。", "settings.sync": "同期ルール",
  "settings.syncLead": "同期フォルダーのどのファイルをこのナレッジベースに含めるか。", "settings.onePerLine": "1 行に 1 つ。",
  "settings.target_tokens": "目標トークン数", "settings.max_tokens": "最大トークン数", "settings.overlap_tokens": "重なりトークン数",
  "settings.noise_patterns": "ノイズパターン（正規表現）", "settings.top_k": "top_k", "settings.rrf_k": "rrf_k",
  "settings.second_model": "第2モデル", "settings.secondModelNone": "なし", "settings.hint.second_model": "英語の KB 向けの第2の埋め込みモデル：検索の第3のレッグ（all-MiniLM-L6-v2）。KB の作成時に設定し、変更は再インデックスでのみ。", "settings.second_weight": "第2モデルの重み", "settings.hint.second_weight": "ハイブリッド検索での第2モデルのレッグの重み（第2モデルを持つ KB のみ）。0 で無効。",
  "settings.dense_weight": "密ベクトルの重み", "settings.keyword_weight": "キーワードの重み", "settings.candidate_multiplier": "候補倍率", "settings.feedback_passages": "フィードバック件数", "settings.feedback_weight": "フィードバックの重み",
  "settings.score_threshold": "スコアしきい値", "settings.rerank_budget_ms": "リランク時間上限（ms）", "settings.rerank_weight": "リランクの重み",
  "settings.max_blocks": "最大パッセージ数", "settings.hybrid": "ハイブリッド（密ベクトル＋キーワード）", "settings.fusion": "融合方式", "settings.rerank": "リランク",
  "settings.rerankAuto": "自動（サーバーにリランカーがある場合）", "settings.rerankOn": "オン", "settings.rerankOff": "オフ",
  "settings.reranker_model": "リランカーモデル", "settings.serverDefault": "サーバーの既定",
  "settings.include_prefixes": "含めるパス接頭辞", "settings.exclude_patterns": "除外パターン", "settings.extensions": "拡張子",
  "settings.saved": "設定を保存しました。", "settings.fixFields": "修正が必要な項目があります。各項目の横のメッセージを確認してください。",
  "settings.analyzer": "解析器", "settings.analyzerLead": "作成時に固定されています。再インデックスで変更できます。", "settings.analyzerVersion": "解析器のバージョン", "settings.bm25": "BM25 の k1 / b",
  "settings.danger": "このナレッジベースを削除", "settings.deleteLead": "インデックス、すべてのドキュメント、このナレッジベースだけが使っていた原本を削除します。",
  "settings.deleteKb": "ナレッジベースを削除…", "settings.deleteTitle": "ナレッジベースを削除しますか？",
  "settings.deleteBody": "「{name}」とそのドキュメント、インデックスは完全に削除されます。", "settings.deleted": "「{name}」を削除しました。",
  "search.lead": "1 つのクエリをセマンティック・キーワード・ハイブリッド・ハイブリッド＋リランクで並べて比較し、各回答にドキュメントが入る・入らない理由を示します。",
  "search.chooseKb": "テストするナレッジベースを選んでください。", "search.query": "クエリ", "search.queryPlaceholder": "ユーザーが尋ねそうな質問",
  "search.run": "実行", "search.running": "実行中…", "search.done": "{ms} ms で完了（往復）。",
  "search.expected": "期待するドキュメント", "search.pickExpected": "ドキュメントを追加…", "search.expectedHint": "各実行での順位、または除外した段階を追跡します。",
  "search.expectedIds": "…またはドキュメント ID", "search.expectedIdsPlaceholder": "ID（カンマ区切り）", "search.removeExpected": "{name} を外す",
  "search.overrides": "設定の上書き（空欄: ナレッジベースの設定）", "search.whyNot": "各実行での期待ドキュメント",
  "search.expectedDocument": "期待するドキュメント", "search.rank": "{rank} 位", "search.droppedBy": "{stage} で除外",
  "search.notInAnswer": "回答に含まれない", "search.legRanks": "密 {dense} · キーワード {keyword} · 融合 {fused}",
  "search.degraded": "縮退", "search.reranked": "リランク済み", "search.ok": "正常", "search.took": "モード {mode} · {ms} ms",
  "search.noPassages": "パッセージなし。", "search.dropped": "除外された候補 {n} 件", "search.effective": "適用された設定",
  "search.expectedMark": "★ 期待",
  "search.original": "原本",
  "eval.lead": "関連度付きの質問セットで検索を採点し、2 つの設定をクエリごとに比較します。",
  "eval.sets": "質問セット", "eval.setName": "名前", "eval.queries": "クエリ数", "eval.judgements": "判定数", "eval.gate": "品質ゲート",
  "eval.isGate": "ゲート", "eval.makeGate": "ゲートにする", "eval.deleteSet": "質問セットを削除しますか？", "eval.deleteSetBody": "「{name}」を削除します。",
  "eval.noSets": "質問セットはまだありません。", "eval.import": "BEIR 形式の質問セットを取り込む", "eval.importLead": "queries.jsonl と qrels の TSV（qrels/<split>.tsv）。判定のあるクエリだけが残ります。",
  "eval.queriesFile": "queries.jsonl", "eval.qrelsFile": "qrels（.tsv）", "eval.asGate": "再インデックスの品質ゲートに使う", "eval.importButton": "取り込む",
  "eval.needFiles": "2 つのファイルを選んでください。", "eval.imported": "「{name}」を取り込みました（{n} 問）。", "eval.run": "評価を実行",
  "eval.importFirst": "まず質問セットを取り込んでください。", "eval.set": "質問セット", "eval.mode": "モード", "eval.kbMode": "ナレッジベースの設定",
  "eval.settings": "設定の上書き（JSON）", "eval.settingsHint": "例: {\"top_k\": 20, \"fusion\": \"rrf\"}。空欄なら上書きなし。",
  "eval.compare": "2 つ目の実行と比較する", "eval.compareMode": "実行 B のモード", "eval.compareSettings": "実行 B の設定（JSON）",
  "eval.maxQueries": "クエリ数（先頭 N 問）", "eval.all": "すべて", "eval.runButton": "評価を実行", "eval.running": "評価中…",
  "eval.done": "{ms} ms で完了。", "eval.badJson": "設定は JSON オブジェクトで指定してください: {error}", "eval.base": "実行 A", "eval.compareRun": "実行 B",
  "eval.metrics": "指標（{queries} 問、深さ {depth}）", "eval.metric": "指標", "eval.delta": "B − A", "eval.winsLosses": "B の勝ち / 負け / 引き分け",
  "eval.chartTitle": "両実行の指標", "eval.chartCaption": "クエリの平均。1 が最良。",
  "eval.degraded": "{n} 問の回答が縮退しました:", "eval.perQuery": "結果が異なるクエリ（{metric}、{n} 問）",
  "eval.query": "クエリ", "eval.topDocs": "上位ドキュメント", "eval.noDifferences": "すべてのクエリで両実行のスコアは同じです。",
  "key.lead": "アプリケーション、エージェント、利用者のためのキー。クライアントキーは許可されたナレッジベースだけを参照できます。",
  "key.new": "新しいキー", "key.name": "名前", "key.role": "ロール", "key.grants": "権限", "key.filter": "検索フィルター",
  "key.allKbs": "すべてのナレッジベース", "key.revokedAt": "{when} に失効", "key.revoke": "失効させる", "key.revokeTitle": "このキーを失効させますか？",
  "key.revokeBody": "「{name}」はすべての場所で直ちに使えなくなります。", "key.revoked": "「{name}」を失効させました。", "key.perm.none": "アクセスなし",
  "key.perm.read": "読み取り", "key.perm.write": "読み書き", "key.grantFor": "{kb} へのアクセス", "key.grantsLead": "ナレッジベースごとに、読み取り（検索・一覧）または書き込み（アップロード・削除も）。",
  "key.filterLead": "このキーのすべての検索に AND で適用されます。リクエストで狭めることはできても、広げることはできません。", "key.labelsAny": "いずれかのラベルを持つパッセージのみ",
  "key.create": "キーを作成", "key.editTitle": "「{name}」の権限", "key.updated": "「{name}」を更新しました。",
  "key.createdTitle": "キー「{name}」を作成しました", "key.shownOnce": "今すぐキーをコピーしてください。表示されるのはこの一度だけで、再表示はできません。",
  "key.theKey": "新しいキー", "key.copy": "コピー", "key.copied": "コピーしました", "key.saved": "保存しました",
};

const DICTIONARIES = { en, ja };

function fromBrowser() {
  for (const tag of navigator.languages || [navigator.language || "en"]) {
    const base = String(tag).toLowerCase().split("-")[0];
    if (base in DICTIONARIES) return base;
  }
  return "en";
}

let current = (() => {
  try { const saved = localStorage.getItem(STORE); if (saved in DICTIONARIES) return saved; } catch (err) { /* storage off */ }
  return fromBrowser();
})();
document.documentElement.lang = current;

export function lang() { return current; }

export function setLang(code) {
  if (!(code in DICTIONARIES)) return;
  current = code;
  document.documentElement.lang = code;
  try { localStorage.setItem(STORE, code); } catch (err) { /* storage off: the choice lasts this page */ }
}

export function t(key, params, fallback) {
  let text = DICTIONARIES[current][key] ?? en[key];
  if (text === undefined) text = fallback === undefined ? key : fallback;
  for (const [name, value] of Object.entries(params || {})) text = text.split("{" + name + "}").join(String(value));
  return text;
}

// The few texts of the page itself (console.html), outside the views.
export function applyStaticTexts() {
  document.documentElement.lang = current;
  document.title = t("title");
  const texts = { "lang-label": "language", signout: "signOut" };
  for (const [id, key] of Object.entries(texts)) { const node = document.getElementById(id); if (node) node.textContent = t(key); }
  const skip = document.querySelector(".skip");
  if (skip) skip.textContent = t("skip");
  const nav = document.getElementById("nav");
  if (nav) nav.setAttribute("aria-label", t("title"));
}
