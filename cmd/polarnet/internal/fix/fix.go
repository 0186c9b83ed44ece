// Package fix is the analysis behind `polarnet fix`: it moves a program's
// dials and listens from Go's net to polarnet's dialer and listener, and
// its assertions to net's concrete conn types to the interfaces both
// paths' conns satisfy (polarnet.AnyTCPConn, AnyTCPListener, AnyUDPConn).
// What it cannot rewrite safely it reports, with what to do instead.
package fix

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Analyzer rewrites a package for polarnet; every rewrite is a diagnostic
// with a suggested fix, and what it cannot rewrite is a diagnostic without
// one.
var Analyzer = &analysis.Analyzer{
	Name: "polarnetfix",
	Doc: `move net.Dial/Listen and *net.TCPConn assertions to polarnet

polarnetfix rewrites net.Dial, net.DialTimeout, net.Dialer, net.Listen,
net.ListenPacket and net.ListenConfig to polarnet's dialer and listener,
gives http.Transport literals without a dial function dialer.DialContext,
and turns assertions to *net.TCPConn, *net.TCPListener and *net.UDPConn
into polarnet.AnyTCPConn, AnyTCPListener and AnyUDPConn. It reports what
it cannot rewrite (net.DialTCP, net.ListenTCP, File, SyscallConn,
http.DefaultTransport, http.ListenAndServe, ...) with what to do.`,
	Run: run,
}

const (
	dialerPath   = "github.com/polarnet/polarnet/dialer"
	listenerPath = "github.com/polarnet/polarnet/listener"
	polarnetPath = "github.com/polarnet/polarnet/polarnet"
)

// renames maps net's package-level names to their drop-in replacements,
// which have the same signatures, fields and methods.
var renames = map[string]string{
	"Dial":         dialerPath,
	"DialTimeout":  dialerPath,
	"Dialer":       dialerPath,
	"Listen":       listenerPath,
	"ListenPacket": listenerPath,
	"ListenConfig": listenerPath,
}

// assertions maps net's concrete types to the interfaces of package
// polarnet that net's and polarnet's values both satisfy, with the methods
// of net's type that the interface lacks.
var assertions = map[string]struct {
	iface   string
	lacking []string
}{
	"TCPConn":     {"AnyTCPConn", []string{"File", "SyscallConn"}},
	"TCPListener": {"AnyTCPListener", []string{"AcceptTCP", "File", "SyscallConn"}},
	"UDPConn":     {"AnyUDPConn", []string{"File", "SyscallConn"}},
}

// kernelOnly are net's functions with no polarnet counterpart, and what
// to call instead.
var kernelOnly = map[string]string{
	"DialTCP":      "dialer.Dial(network, raddr.String()) (a dialer.Dialer with LocalAddr for laddr), asserting polarnet.AnyTCPConn",
	"ListenTCP":    "listener.Listen(network, laddr.String()), asserting polarnet.AnyTCPListener",
	"DialUDP":      "dialer.Dial(network, raddr.String()) (a dialer.Dialer with LocalAddr for laddr), asserting polarnet.AnyUDPConn",
	"ListenUDP":    "listener.ListenPacket(network, laddr.String()), asserting polarnet.AnyUDPConn",
	"DialIP":       "nothing: polarnet carries TCP and UDP only, so raw IP stays on the kernel",
	"ListenIP":     "nothing: polarnet carries TCP and UDP only, so raw IP stays on the kernel",
	"FileConn":     "nothing: a polarnet conn has no file descriptor",
	"FileListener": "nothing: a polarnet listener has no file descriptor",
}

// netMethods are the methods of net's types that polarnet's counterparts
// lack, by receiver type, with what to do instead.
var netMethods = map[string]map[string]string{
	"TCPConn":     {"File": noFD, "SyscallConn": noFD},
	"UDPConn":     {"File": noFD, "SyscallConn": noFD},
	"TCPListener": {"File": noFD, "SyscallConn": noFD, "AcceptTCP": "use Accept and assert polarnet.AnyTCPConn: the listener may be polarnet's"},
	"Dialer":      {"DialTCP": typedDial, "DialUDP": typedDial, "DialIP": typedDial, "DialUnix": typedDial},
}

const (
	noFD      = "a polarnet conn has no file descriptor: keep the call behind a comma-ok assertion to the *net type, with a path for conns that are not"
	typedDial = "it returns net's concrete type, which dialer.Dialer has no method for: use DialContext and assert polarnet.AnyTCPConn or AnyUDPConn"
)

func run(pass *analysis.Pass) (any, error) {
	for _, f := range pass.Files {
		if ast.IsGenerated(f) {
			continue
		}
		// Every file: one need not import net to build an http.Transport
		// or to call File on a conn another package returned.
		fx := &fileFix{pass: pass, file: f, parents: parents(f), importsNet: importedName(f, "net") != ""}
		fx.walk()
		fx.emit()
	}
	return nil, nil
}

// rewrite replaces a node's text; pkg is the package its text names.
type rewrite struct {
	pos, end token.Pos
	at       token.Pos // where to report it, if not at pos
	pkg      string
	text     func(name string) string // given the name pkg is imported as
	msg      string
	netUses  int // how many uses of the net import it removes
}

type fileFix struct {
	pass       *analysis.Pass
	file       *ast.File
	parents    map[ast.Node]ast.Node
	importsNet bool
	rewrites   []rewrite
}

func (fx *fileFix) walk() {
	blocked := fx.blockedTypes()
	ast.Inspect(fx.file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			fx.selector(n, blocked)
		case *ast.TypeAssertExpr:
			if n.Type != nil {
				fx.assertion(n.Type, n)
			}
		case *ast.TypeSwitchStmt:
			for _, s := range n.Body.List {
				cc := s.(*ast.CaseClause)
				for _, typ := range cc.List {
					fx.assertion(typ, cc)
				}
			}
		case *ast.CompositeLit:
			fx.transport(n)
		}
		return true
	})
}

// netObj returns the object of package net that sel names, if any.
func (fx *fileFix) netObj(sel *ast.SelectorExpr) types.Object {
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return nil
	}
	pn, ok := fx.pass.TypesInfo.Uses[id].(*types.PkgName)
	if !ok || pn.Imported().Path() != "net" {
		return nil
	}
	return fx.pass.TypesInfo.Uses[sel.Sel]
}

func (fx *fileFix) selector(sel *ast.SelectorExpr, blocked map[string]string) {
	if obj := fx.netObj(sel); obj != nil {
		name := obj.Name()
		if pkg, ok := renames[name]; ok {
			if why, ok := blocked[name]; ok {
				fx.pass.Reportf(sel.Pos(), "net.%s left as it is: %s", name, why)
				return
			}
			fx.rewrites = append(fx.rewrites, rewrite{
				pos: sel.Pos(), end: sel.End(), pkg: pkg, netUses: 1,
				text: func(n string) string { return n + "." + name },
				msg:  fmt.Sprintf("net.%s → %s.%s", name, pathBase(pkg), name),
			})
			return
		}
		if advice, ok := kernelOnly[name]; ok {
			fx.pass.Reportf(sel.Pos(), "net.%s cannot be rewritten: use %s", name, advice)
		}
		return
	}
	if recv, advice := fx.netMethod(sel); advice != "" {
		fx.pass.Reportf(sel.Sel.Pos(), "%s on net.%s cannot be rewritten: %s", sel.Sel.Name, recv, advice)
	}
	switch obj := fx.pass.TypesInfo.Uses[sel.Sel]; {
	case obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != "net/http":
	case obj.Name() == "DefaultTransport":
		fx.pass.Reportf(sel.Pos(), "http.DefaultTransport (and what clones it) dials with Go's net: set its DialContext to dialer.DialContext, once, before the first request")
	case httpListens[obj.Name()]:
		fx.pass.Reportf(sel.Sel.Pos(), "http's %s listens with Go's net: listen with listener.Listen(\"tcp\", addr) and call Serve (ServeTLS) on the listener", obj.Name())
	}
}

// httpListens are net/http's functions and Server methods that open their
// own listener with Go's net, out of the fix's reach.
var httpListens = map[string]bool{"ListenAndServe": true, "ListenAndServeTLS": true}

// netMethod returns the receiver type's name and the advice when sel is a
// method of netMethods, "" otherwise.
func (fx *fileFix) netMethod(sel *ast.SelectorExpr) (recv, advice string) {
	s, ok := fx.pass.TypesInfo.Selections[sel]
	if !ok || s.Kind() != types.MethodVal {
		return "", ""
	}
	t := s.Recv()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "net" {
		return "", ""
	}
	return n.Obj().Name(), netMethods[n.Obj().Name()][sel.Sel.Name]
}

// blockedTypes lists net.Dialer and net.ListenConfig when the file passes
// one to a function outside net, whose parameter the rewrite would break,
// or calls a method of net.Dialer that dialer.Dialer lacks.
func (fx *fileFix) blockedTypes() map[string]string {
	blocked := map[string]string{}
	ast.Inspect(fx.file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if recv, advice := fx.netMethod(sel); recv == "Dialer" && advice != "" {
				blocked[recv] = fmt.Sprintf("the file calls its %s at %s, which dialer.Dialer lacks", sel.Sel.Name, fx.pass.Fset.Position(sel.Sel.Pos()))
			}
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sig, ok := fx.pass.TypesInfo.TypeOf(call.Fun).(*types.Signature)
		if !ok {
			return true
		}
		if fn := typeutilCallee(fx.pass.TypesInfo, call); fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == "net" {
			return true
		}
		for i := range sig.Params().Len() {
			t := sig.Params().At(i).Type()
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if n, ok := t.(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "net" {
				if name := n.Obj().Name(); name == "Dialer" || name == "ListenConfig" {
					blocked[name] = fmt.Sprintf("the file passes one to %s at %s, which takes net's type",
						types.ExprString(call.Fun), fx.pass.Fset.Position(call.Pos()))
				}
			}
		}
		return true
	})
	return blocked
}

func typeutilCallee(info *types.Info, call *ast.CallExpr) types.Object {
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		return info.Uses[fun]
	case *ast.SelectorExpr:
		return info.Uses[fun.Sel]
	}
	return nil
}

// assertion rewrites typ, the type of a type assertion or of a type
// switch case, when it is *net.TCPConn, *net.TCPListener or *net.UDPConn
// and the value it yields is only used in ways the interface allows.
func (fx *fileFix) assertion(typ ast.Expr, ctx ast.Node) {
	star, ok := typ.(*ast.StarExpr)
	if !ok {
		return
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return
	}
	obj := fx.netObj(sel)
	if obj == nil {
		return
	}
	a, ok := assertions[obj.Name()]
	if !ok {
		return
	}
	allowed := allowedMethods(obj.Type(), a.lacking)
	if why := fx.usesBeyond(ctx, allowed); why != "" {
		fx.pass.Reportf(typ.Pos(), "*net.%s assertion left as it is (%s): it fails for polarnet's conns; assert polarnet.%s where the value may come from dialer or listener",
			obj.Name(), why, a.iface)
		return
	}
	fx.rewrites = append(fx.rewrites, rewrite{
		pos: typ.Pos(), end: typ.End(), pkg: polarnetPath, netUses: 1,
		text: func(n string) string { return n + "." + a.iface },
		msg:  fmt.Sprintf("*net.%s assertion → polarnet.%s, which net's and polarnet's %s both satisfy", obj.Name(), a.iface, obj.Name()),
	})
}

// allowedMethods is the method set of *T less lacking.
func allowedMethods(t types.Type, lacking []string) map[string]bool {
	out := map[string]bool{}
	ms := types.NewMethodSet(types.NewPointer(t))
	for i := range ms.Len() {
		if name := ms.At(i).Obj().Name(); !slices.Contains(lacking, name) {
			out[name] = true
		}
	}
	return out
}

// usesBeyond says how the value of an assertion (ctx: the TypeAssertExpr)
// or type switch case (ctx: the CaseClause) is used beyond allowed
// methods, or "" when it is not.
func (fx *fileFix) usesBeyond(ctx ast.Node, allowed map[string]bool) string {
	info := fx.pass.TypesInfo
	if cc, ok := ctx.(*ast.CaseClause); ok {
		if len(cc.List) != 1 {
			return "" // the case variable keeps the switch's type
		}
		if v, ok := info.Implicits[cc].(*types.Var); ok {
			return fx.varUsesBeyond(v, allowed)
		}
		return ""
	}
	expr := ctx.(ast.Expr)
	switch p := fx.parent(expr).(type) {
	case *ast.SelectorExpr:
		if !allowed[p.Sel.Name] {
			return "calls " + p.Sel.Name
		}
		return ""
	case *ast.AssignStmt:
		for i, rhs := range p.Rhs {
			if rhs != expr || i >= len(p.Lhs) {
				continue
			}
			id, ok := p.Lhs[i].(*ast.Ident)
			if !ok {
				return "assigned to " + types.ExprString(p.Lhs[i])
			}
			if v, ok := info.Defs[id].(*types.Var); ok {
				return fx.varUsesBeyond(v, allowed)
			}
			if id.Name == "_" {
				return ""
			}
			if !fits(info.TypeOf(id), allowed) {
				return "assigned to " + id.Name + " of type " + info.TypeOf(id).String()
			}
			return ""
		}
	case *ast.ValueSpec:
		if p.Type == nil {
			for i, v := range p.Values {
				if v == expr && i < len(p.Names) {
					if obj, ok := info.Defs[p.Names[i]].(*types.Var); ok {
						return fx.varUsesBeyond(obj, allowed)
					}
				}
			}
		}
	case *ast.ExprStmt:
		return ""
	}
	return "its value is used as net's type"
}

// varUsesBeyond checks every use of v.
func (fx *fileFix) varUsesBeyond(v *types.Var, allowed map[string]bool) string {
	info := fx.pass.TypesInfo
	for id, obj := range info.Uses {
		if obj != v {
			continue
		}
		pos := fx.pass.Fset.Position(id.Pos())
		switch p := fx.parent(id).(type) {
		case *ast.SelectorExpr:
			if !allowed[p.Sel.Name] {
				return fmt.Sprintf("%s.%s at line %d", id.Name, p.Sel.Name, pos.Line)
			}
			continue
		case *ast.BinaryExpr:
			continue // a comparison, with nil mostly
		case *ast.CallExpr:
			if param := paramType(info, p, id); param != nil && fits(param, allowed) {
				continue
			}
		case *ast.AssignStmt:
			if i := slices.Index(p.Rhs, ast.Expr(id)); i >= 0 && i < len(p.Lhs) && fits(info.TypeOf(p.Lhs[i]), allowed) {
				continue
			}
		}
		return fmt.Sprintf("%s is used as net's type at line %d", id.Name, pos.Line)
	}
	return ""
}

// paramType is the type of the parameter arg is passed to.
func paramType(info *types.Info, call *ast.CallExpr, arg ast.Expr) types.Type {
	sig, ok := info.TypeOf(call.Fun).(*types.Signature)
	if !ok {
		return nil
	}
	i := slices.Index(call.Args, arg)
	switch {
	case i < 0:
		return nil
	case sig.Variadic() && i >= sig.Params().Len()-1:
		if s, ok := sig.Params().At(sig.Params().Len() - 1).Type().(*types.Slice); ok {
			return s.Elem()
		}
		return nil
	}
	return sig.Params().At(i).Type()
}

// fits reports whether an interface value with the allowed methods (all
// with net's signatures) can be assigned to t: t is an interface needing
// no others.
func fits(t types.Type, allowed map[string]bool) bool {
	if t == nil {
		return false
	}
	iface, ok := t.Underlying().(*types.Interface)
	if !ok {
		return false
	}
	for i := range iface.NumMethods() {
		if !allowed[iface.Method(i).Name()] {
			return false
		}
	}
	return true
}

// transport gives an http.Transport literal without a dial function
// dialer.DialContext; one that has a dial function is left to the other
// rewrites.
func (fx *fileFix) transport(lit *ast.CompositeLit) {
	t := fx.pass.TypesInfo.TypeOf(lit)
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "net/http" || n.Obj().Name() != "Transport" {
		return
	}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return
		}
		if k, ok := kv.Key.(*ast.Ident); ok && strings.HasPrefix(k.Name, "Dial") {
			return
		}
	}
	at, text := lit.Lbrace+1, "\nDialContext: %s.DialContext,\n"
	if len(lit.Elts) > 0 {
		at, text = lit.Elts[0].Pos(), "DialContext: %s.DialContext,\n"
	}
	fx.rewrites = append(fx.rewrites, rewrite{
		pos: at, end: at, at: lit.Pos(), pkg: dialerPath,
		text: func(n string) string { return fmt.Sprintf(text, n) },
		msg:  "http.Transport without a dial function dials with Go's net: DialContext: dialer.DialContext",
	})
}

func (fx *fileFix) parent(n ast.Node) ast.Node {
	p := fx.parents[n]
	for {
		if pe, ok := p.(*ast.ParenExpr); ok {
			p = fx.parents[pe]
			continue
		}
		return p
	}
}

func parents(f *ast.File) map[ast.Node]ast.Node {
	out := map[ast.Node]ast.Node{}
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		if len(stack) > 0 {
			out[n] = stack[len(stack)-1]
		}
		stack = append(stack, n)
		return true
	})
	return out
}

// emit reports each rewrite with its fix: the rewrite itself, the imports
// it needs and, when the rewrites leave net unused, the removal of its
// import. Edits shared by several fixes are identical, so applying them
// all applies each once.
func (fx *fileFix) emit() {
	if len(fx.rewrites) == 0 {
		return
	}
	names := map[string]string{}
	var specs []string
	for _, path := range []string{dialerPath, listenerPath, polarnetPath} {
		var needed []token.Pos
		for _, r := range fx.rewrites {
			if r.pkg == path {
				needed = append(needed, r.pos)
			}
		}
		if len(needed) == 0 {
			continue
		}
		name, spec := fx.importName(path, needed)
		names[path] = name
		if spec != "" {
			specs = append(specs, spec)
		}
	}
	var importEdits []analysis.TextEdit
	if len(specs) > 0 {
		importEdits = append(importEdits, fx.addImports(specs))
	}
	removed := 0
	for _, r := range fx.rewrites {
		removed += r.netUses
	}
	if fx.importsNet && removed == fx.netUses() {
		importEdits = append(importEdits, fx.deleteImport("net"))
	}
	for _, r := range fx.rewrites {
		edits := append([]analysis.TextEdit{{Pos: r.pos, End: r.end, NewText: []byte(r.text(names[r.pkg]))}}, importEdits...)
		at := r.at
		if !at.IsValid() {
			at = r.pos
		}
		fx.pass.Report(analysis.Diagnostic{
			Pos: at, Message: r.msg,
			SuggestedFixes: []analysis.SuggestedFix{{Message: r.msg, TextEdits: edits}},
		})
	}
}

// netUses counts the file's references to the net import.
func (fx *fileFix) netUses() int {
	n := 0
	ast.Inspect(fx.file, func(node ast.Node) bool {
		if id, ok := node.(*ast.Ident); ok {
			if pn, ok := fx.pass.TypesInfo.Uses[id].(*types.PkgName); ok && pn.Imported().Path() == "net" {
				n++
			}
		}
		return true
	})
	return n
}

// importName is the name path is, or will be, imported as in the file,
// with the import spec to add if it is missing. The package's own name is
// taken unless something else goes by it where it is needed.
func (fx *fileFix) importName(path string, needed []token.Pos) (name, spec string) {
	if name := importedName(fx.file, path); name != "" {
		return name, ""
	}
	name = pathBase(path)
	for _, pos := range needed {
		if scope := fx.pass.Pkg.Scope().Innermost(pos); scope != nil {
			if _, obj := scope.LookupParent(name, pos); obj != nil {
				name = "pn" + name
				break
			}
		}
	}
	spec = strconv.Quote(path)
	if name != pathBase(path) {
		spec = name + " " + spec
	}
	return name, spec
}

// addImports adds specs in one edit, so that every fix carries the same
// one: to the file's last group of imports when it holds no standard
// library package, else as a group of their own.
func (fx *fileFix) addImports(specs []string) analysis.TextEdit {
	after := fx.file.Name.End()
	for _, d := range fx.file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		after = g.End()
		if !g.Lparen.IsValid() {
			continue
		}
		text := "\n\t" + strings.Join(specs, "\n\t") + "\n"
		if last := g.Specs[len(g.Specs)-1].(*ast.ImportSpec); strings.Contains(strings.Split(last.Path.Value, "/")[0], ".") {
			text = "\t" + strings.Join(specs, "\n\t") + "\n"
		}
		return analysis.TextEdit{Pos: g.Rparen, End: g.Rparen, NewText: []byte(text)}
	}
	text := "\n\nimport " + specs[0]
	if len(specs) > 1 {
		text = "\n\nimport (\n\t" + strings.Join(specs, "\n\t") + "\n)"
	}
	return analysis.TextEdit{Pos: after, End: after, NewText: []byte(text)}
}

// deleteImport removes the lines of path's import spec, or of its whole
// declaration when it is alone.
func (fx *fileFix) deleteImport(path string) analysis.TextEdit {
	var node ast.Node
	for _, d := range fx.file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		for _, s := range g.Specs {
			if is := s.(*ast.ImportSpec); is.Path.Value == strconv.Quote(path) {
				node = is
				if !g.Lparen.IsValid() {
					node = g
				}
			}
		}
	}
	if _, ok := node.(*ast.GenDecl); ok {
		// addImports may insert right after it.
		return analysis.TextEdit{Pos: node.Pos(), End: node.End()}
	}
	tf := fx.pass.Fset.File(node.Pos())
	start := tf.LineStart(tf.Line(node.Pos()))
	end := node.End()
	if line := tf.Line(end); line < tf.LineCount() {
		end = tf.LineStart(line + 1)
	}
	return analysis.TextEdit{Pos: start, End: end}
}

// importedName is the name the file imports path as, "" if it does not.
func importedName(f *ast.File, path string) string {
	for _, is := range f.Imports {
		if p, _ := strconv.Unquote(is.Path.Value); p == path {
			if is.Name != nil {
				return is.Name.Name
			}
			return pathBase(path)
		}
	}
	return ""
}

func pathBase(path string) string { return path[strings.LastIndex(path, "/")+1:] }
